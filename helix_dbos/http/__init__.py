"""helix_dbos.http."""
