"""helix_dbos.store."""
