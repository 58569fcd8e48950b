"""Checkpoints (``__agents_checkpoints``) and the session row's pointer to its newest one.

A checkpoint is the row an exactly-once step commits with its writes; its id is the step's
marker, so a second write of one id fails with ``IntegrityError``. The session row points at
its newest checkpoint, and the pointer only moves forward: the step's own compare-and-swap
moves it (``pointing``), or ``write_checkpoint`` does, only to a newer checkpoint.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from .batch import CHECKPOINTS, STATES, current_batch
from .engine import StoreEngine
from .schema import checkpoints, messages, states

__all__ = [
    "Pointing",
    "latest_checkpoint",
    "pointer_for",
    "pointing",
    "stamp",
    "write_checkpoint",
]


def stamp(created_at: datetime | None) -> datetime:
    """A checkpoint's stamp in UTC: now, or the instant ``created_at`` names, whatever the
    host's time zone. Rule 14 compares stamps, and SQLite keeps a time without its offset: a
    stamp kept in local time would read back hours off and hold the pointer back.

    Raises:
        ValueError: ``created_at`` carries no time zone, so it names no instant.
    """
    if created_at is None:
        return datetime.now(UTC)
    if created_at.tzinfo is None or created_at.utcoffset() is None:
        raise ValueError(
            f"created_at {created_at.isoformat()} has no time zone: give an aware datetime "
            "(for example datetime.now(UTC))"
        )
    return created_at.astimezone(UTC)


@dataclass
class Pointing:
    """A checkpoint that the next compare-and-swap of its session row points at."""

    session_id: str
    checkpoint_id: str
    done: bool = False


_pointing: ContextVar[Pointing | None] = ContextVar("helix_store_pointing", default=None)


@contextmanager
def pointing(session_id: str, checkpoint_id: str) -> Iterator[Pointing]:
    """Within this block, a ``save`` of ``session_id`` also sets its checkpoint pointer to
    ``checkpoint_id``; ``done`` then tells ``write_checkpoint`` that the pointer needs no
    UPDATE of its own."""
    note = Pointing(session_id, checkpoint_id)
    token = _pointing.set(note)
    try:
        yield note
    finally:
        _pointing.reset(token)


def pointer_for(session_id: str) -> str | None:
    """The checkpoint a ``save`` of ``session_id`` points its row at now (noted as done), if
    a ``pointing`` block names one."""
    note = _pointing.get()
    if note is None or note.session_id != session_id:
        return None
    note.done = True
    return note.checkpoint_id


async def write_checkpoint(
    db: StoreEngine,
    session_id: str,
    run_id: str | None,
    *,
    step_count: int,
    state: dict[str, Any],
    message_count: int | None,
    checkpoint_id: str | None,
    created_at: datetime | None,
    pointed: bool,
    conn: AsyncConnection | None,
) -> str:
    """Write a checkpoint (queued in a transaction that queues its writes) and point the
    session at it, unless ``pointed`` or it points at a newer one; its id."""
    checkpoint_id = checkpoint_id or f"cp_{uuid.uuid4().hex}"
    created_at = stamp(created_at)
    batch = current_batch(conn)
    if batch is not None:
        await batch.checkpoint(
            {
                "checkpoint_id": checkpoint_id,
                "session_id": session_id,
                "run_id": run_id,
                "step_count": step_count,
                "message_count": message_count,
                "state": state,
                "created_at": created_at.isoformat(),
            },
            pointed=pointed,
        )
        return checkpoint_id
    count: Any = message_count
    if count is None:
        count = (
            sa.select(sa.func.count())
            .select_from(messages)
            .where(messages.c.session_id == session_id)
            .scalar_subquery()
        )
    async with db.transaction(conn) as c:
        await c.execute(
            checkpoints.insert().values(
                checkpoint_id=checkpoint_id,
                session_id=session_id,
                run_id=run_id,
                step_count=step_count,
                message_count=count,
                state=state,
                created_at=created_at,
            )
        )
        if not pointed:  # else the transition's own compare-and-swap moved it
            await _point_forward(c, session_id, checkpoint_id, created_at)
    return checkpoint_id


async def _point_forward(
    c: AsyncConnection, session_id: str, checkpoint_id: str, created_at: datetime
) -> None:
    """Point the session at ``checkpoint_id`` unless it points at a newer one: a writer
    holding an older checkpoint (a slow re-execution, a stale replica of the step) never
    moves it back."""
    current = checkpoints.alias("current")
    newer_exists = (
        sa.select(current.c.checkpoint_id)
        .where(
            current.c.checkpoint_id == states.c.latest_checkpoint_id,
            current.c.created_at > created_at,
        )
        .exists()
    )
    await c.execute(
        states.update()
        .where(states.c.session_id == session_id, ~newer_exists)
        .values(latest_checkpoint_id=checkpoint_id)
    )


async def latest_checkpoint(
    db: StoreEngine, session_id: str, conn: AsyncConnection | None
) -> dict[str, Any] | None:
    """The checkpoint the session points at (never "highest step count")."""
    async with db.read(conn, (STATES, CHECKPOINTS)) as c:
        row = (
            await c.execute(
                sa.select(checkpoints)
                .join(states, states.c.latest_checkpoint_id == checkpoints.c.checkpoint_id)
                .where(states.c.session_id == session_id)
            )
        ).first()
    return dict(row._mapping) if row is not None else None
