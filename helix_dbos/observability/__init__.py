"""Log events, usage metrics and per-turn summaries."""
