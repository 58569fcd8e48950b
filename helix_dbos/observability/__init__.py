"""Log events, usage metrics and per-turn summaries.

Internal: the events and metrics themselves are the public contract (docs/observability.md),
and ``helix_dbos.testing.capture_log_events`` collects them in tests. See docs/public-api.md.
"""

__all__: list[str] = []
