"""The conversation log as rows, and the checkpoints it is restored from.

A rewind never deletes a row: it marks the rows that leave the conversation (``content.rewound``
with when and why) and clears their ``tool_call_id`` column, so the call may be answered again
in the restored conversation while the old answer stays readable for audit. A row that comes
back into the conversation (a retry's re-appended input, or rewinding to a later point again)
is re-appended as a copy that names its original (``meta.restoredFrom``), so the conversation is always the unmarked rows
in ``message_id`` order.

Which rows were the conversation at a checkpoint: the first ``message_count`` rows of the
session (the checkpoint counts every row, marked or not, in its own transaction), without those
a rewind had already taken out when the checkpoint was written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from ..core.messages import Message
from .batch import CHECKPOINTS, MESSAGES, settle
from .engine import joined
from .schema import checkpoints, messages

__all__ = [
    "LIVE_MESSAGE",
    "CheckpointRow",
    "LogRow",
    "checkpoint_kind",
    "conversation_at",
    "list_checkpoints",
    "load_rows",
    "mark_rewound",
]

#: The rows of the conversation: those no rewind took out.
LIVE_MESSAGE = messages.c.content["rewound"].as_string().is_(None)


def _utc(value: datetime) -> datetime:
    # SQLite returns naive datetimes; everything we write is UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class LogRow:
    """One ``__agents_messages`` row, marked or not."""

    message_id: int
    message: Message
    run_id: str | None
    rewound_at: datetime | None
    """When a rewind took the row out of the conversation (``None``: it is in it)."""


@dataclass(frozen=True)
class CheckpointRow:
    """One ``__agents_checkpoints`` row, without its stored result."""

    checkpoint_id: str
    session_id: str
    run_id: str | None
    step_count: int
    message_count: int
    created_at: datetime

    @property
    def kind(self) -> str:
        """What wrote it: ``model``, ``results``, ``finish``, ``lifecycle`` ..."""
        return checkpoint_kind(self.checkpoint_id)


def checkpoint_kind(checkpoint_id: str) -> str:
    """The step kind a checkpoint id ends with (``<workflow id>:<step id>:<kind>``)."""
    return checkpoint_id.rpartition(":")[2]


async def load_rows(session_id: str) -> list[LogRow]:
    """Every row of the session, marked or not, oldest first (in the unit of work, or in
    ``SessionStore.reading``)."""
    conn = joined()
    await settle(conn, (MESSAGES,))
    rows = (
        await conn.execute(
            sa.select(messages.c.message_id, messages.c.role, messages.c.content, messages.c.run_id)
            .where(messages.c.session_id == session_id)
            .order_by(messages.c.message_id)
        )
    ).all()
    out: list[LogRow] = []
    for r in rows:
        content = dict(r.content)
        rewound = content.pop("rewound", None)
        at = datetime.fromisoformat(rewound["at"]) if isinstance(rewound, dict) else None
        out.append(LogRow(r.message_id, Message.from_row(r.role, content), r.run_id, at))
    return out


async def mark_rewound(message_ids: list[int], marker: dict[str, Any], at: datetime) -> None:
    """Take rows out of the conversation (kept for audit): ``content.rewound`` is set, in the
    unit of work."""
    if not message_ids:
        return
    conn = joined()
    await settle(conn, (MESSAGES,))
    rows = (
        await conn.execute(
            sa.select(messages.c.message_id, messages.c.content).where(
                messages.c.message_id.in_(message_ids)
            )
        )
    ).all()
    for r in rows:
        content = {**dict(r.content), "rewound": {**marker, "at": at.isoformat()}}
        await conn.execute(
            messages.update()
            .where(messages.c.message_id == r.message_id)
            .values(content=content, tool_call_id=None)
        )


def conversation_at(rows: list[LogRow], checkpoint: CheckpointRow) -> list[LogRow]:
    """The rows that were the conversation when ``checkpoint`` was written."""
    created = _utc(checkpoint.created_at)
    return [
        row
        for row in rows[: checkpoint.message_count]
        if row.rewound_at is None or _utc(row.rewound_at) > created
    ]


async def list_checkpoints(
    session_id: str, checkpoint_id: str | None = None
) -> list[CheckpointRow]:
    """The session's checkpoints, newest first (or the one named, if it is the session's), in
    the unit of work or in ``SessionStore.reading``."""
    conn = joined()
    await settle(conn, (CHECKPOINTS,))
    query = sa.select(
        checkpoints.c.checkpoint_id,
        checkpoints.c.session_id,
        checkpoints.c.run_id,
        checkpoints.c.step_count,
        checkpoints.c.message_count,
        checkpoints.c.created_at,
    ).where(checkpoints.c.session_id == session_id)
    if checkpoint_id is not None:
        query = query.where(checkpoints.c.checkpoint_id == checkpoint_id)
    rows = (await conn.execute(query)).all()
    found = [
        CheckpointRow(
            r.checkpoint_id,
            r.session_id,
            r.run_id,
            r.step_count,
            r.message_count,
            _utc(r.created_at),
        )
        for r in rows
    ]
    return sorted(found, key=lambda c: (c.created_at, c.message_count), reverse=True)
