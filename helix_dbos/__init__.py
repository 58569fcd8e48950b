"""helix-dbos: a Postgres-native durable agent runtime on DBOS Transact."""

__version__ = "0.1.0"
