"""The wall clock, in the one unit the framework stores: epoch milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["now_ms"]


def now_ms() -> int:
    """Wall-clock epoch milliseconds."""
    return int(datetime.now(UTC).timestamp() * 1000)
