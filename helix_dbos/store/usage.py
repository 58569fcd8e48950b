"""Usage rows (``__agents_usage``): what a turn counted (tokens, tool calls, custom figures).

A row carries a ``dedupe_key``; a row whose key exists is skipped, so a replayed step counts
nothing twice. In a transaction that queues its writes (Postgres, ``batch.py``) the rows are
queued; else inserted at once, with the dialect's "skip on conflict" (``dialect.Paths``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ..core.clock import now_ms
from .batch import current_batch
from .dialect import Paths
from .engine import StoreEngine

__all__ = ["UsageRow", "record_usage"]

UsageRow = dict[str, Any]
"""``{kind, source_type, source_name, value | data, session_id, run_id, timestamp, dedupe_key}``."""


async def record_usage(
    db: StoreEngine, paths: Paths, rows: Sequence[UsageRow], conn: AsyncConnection | None
) -> None:
    """Insert usage rows; a row whose ``dedupe_key`` exists is skipped (replay-safe)."""
    if not rows:
        return
    values = [
        {
            "session_id": r.get("session_id"),
            "run_id": r.get("run_id"),
            "kind": r.get("kind", "custom"),
            "source_type": r["source_type"],
            "source_name": r.get("source_name"),
            "data": r.get("data", {"value": r.get("value", 1)}),
            "timestamp": r.get("timestamp", now_ms()),
            "dedupe_key": r.get("dedupe_key"),
        }
        for r in rows
    ]
    batch = current_batch(conn)
    if batch is not None:
        batch.usage(values)
        return
    async with db.transaction(conn) as c:
        await c.execute(paths.usage_insert, values)
