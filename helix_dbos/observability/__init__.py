"""helix_dbos.observability."""
