"""Times as the read model shows them: ISO-8601 UTC for JSON, spans for people."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["age", "iso", "iso_ms", "span", "utc"]


def utc(value: datetime) -> datetime:
    """``value`` with its zone: UTC when it has none."""
    # SQLite hands timestamps back without their zone; every stored time is UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def iso(value: datetime | None) -> str | None:
    """ISO-8601 in UTC to the second, or ``None``."""
    return utc(value).astimezone(UTC).isoformat(timespec="seconds") if value else None


def iso_ms(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO-8601 in UTC to the second, or ``None``."""
    return iso(datetime.fromtimestamp(ms / 1000, UTC)) if ms is not None else None


def span(seconds: float) -> str:
    """A duration for people: ``42s``, ``17m``, ``5.2h``, ``3.0d`` (its sign dropped)."""
    seconds = abs(seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f}m"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def age(at: datetime | None, now: datetime) -> str:
    """How long before ``now`` ``at`` was (``5m ago``), or ``-``."""
    if at is None:
        return "-"
    return f"{span((utc(now) - utc(at)).total_seconds())} ago"
