"""A session's event stream (``__agents_events``): appending events, and telling this
process's streams that a commit wrote some.

An event's sequence comes from the session row (``event_seq``), so concurrent writers are
serialized by its row lock and a reader never sees a gap fill in later. In a transaction that
queues its writes (Postgres, ``batch.py``) events are queued for a session whose row it holds;
for any other they are appended at once, the dialect's way (``dialect.Paths``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from .batch import WriteBatch, current_batch
from .dialect import Paths
from .engine import StoreEngine

__all__ = ["EventsCommitted", "append_events", "committed"]

#: Called with the sessions whose events a transaction wrote, once it committed.
EventsCommitted = Callable[[set[str]], None]


async def append_events(
    db: StoreEngine,
    paths: Paths,
    session_id: str,
    run_id: str | None,
    new: Sequence[dict[str, Any]],
    conn: AsyncConnection | None,
) -> int:
    """Append events to the session's stream; the last sequence number (0 when the
    transaction's flush numbers them: see ``batch.py``)."""
    if not new:
        return 0
    now = datetime.now(UTC)
    batch = current_batch(conn)
    if batch is not None:
        batch.evented.add(session_id)
        if batch.can_queue_events(session_id):
            return batch.events(session_id, _rows(session_id, run_id, new, now)) or 0
    async with db.transaction(conn) as c:
        return await paths.insert_events(c, session_id, run_id, new, now)


def _rows(
    session_id: str, run_id: str | None, new: Sequence[dict[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    at = now.isoformat()
    return [
        {
            "session_id": session_id,
            "run_id": run_id,
            "type": e["type"],
            "data": e.get("data", {}),
            "created_at": at,
        }
        for e in new
    ]


def committed(batch: WriteBatch, on_events: EventsCommitted | None) -> None:
    """After a commit: this process's streams of its sessions need not wait for NOTIFY."""
    if batch.evented and on_events is not None:
        on_events(batch.evented)
