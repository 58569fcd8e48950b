"""helix_dbos.runtime."""
