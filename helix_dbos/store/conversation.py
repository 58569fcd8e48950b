"""The conversation (``__agents_messages``): appending messages, and what a turn reads with it.

Messages are appended in order, never updated but by a rewind's mark (``history.py``). In a
transaction that queues its writes (Postgres, ``batch.py``) they are queued; the reads, which
differ by dialect, are ``dialect.Paths``'.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ..core.messages import Message
from ..core.session import SessionState
from ..errors import SessionNotFoundError
from .batch import current_batch
from .dialect import Paths
from .engine import StoreEngine
from .schema import messages

__all__ = ["append_messages", "resume_inputs"]


async def append_messages(
    db: StoreEngine,
    session_id: str,
    run_id: str | None,
    new: Sequence[Message],
    conn: AsyncConnection | None,
) -> None:
    """Append messages in order (queued in a transaction that queues its writes)."""
    if not new:
        return
    now = datetime.now(UTC)
    batch = current_batch(conn)
    if batch is not None:
        batch.messages(session_id, _rows(session_id, run_id, new, now.isoformat()))
        return
    async with db.transaction(conn) as c:
        await c.execute(messages.insert(), _rows(session_id, run_id, new, now))


def _rows(
    session_id: str, run_id: str | None, new: Sequence[Message], at: datetime | str
) -> list[dict[str, Any]]:
    return [
        {
            "session_id": session_id,
            "role": m.role,
            "tool_call_id": m.tool_call_id,
            "content": m.to_row(),
            "run_id": run_id,
            "created_at": at,
        }
        for m in new
    ]


async def resume_inputs(
    paths: Paths,
    session_id: str,
    session_ids: Sequence[str],
    conn: AsyncConnection | None,
) -> tuple[dict[str, SessionState], list[Message]]:
    """The rows of ``session_ids`` and ``session_id``, and ``session_id``'s conversation.

    Raises:
        SessionNotFoundError: ``session_id`` does not exist.
    """
    ids = list(dict.fromkeys([session_id, *session_ids]))
    states, history = await paths.resume_inputs(session_id, ids, conn)
    if session_id not in states:
        raise SessionNotFoundError(f"No session {session_id!r}", sessionId=session_id)
    return states, history
