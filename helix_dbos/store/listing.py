"""Listing sessions for an operator: the newest first, with when each was created and updated."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from ..core.session import SessionState
from . import row as session_row
from .schema import states
from .store import SessionStore

__all__ = ["ListedSession", "recent_sessions"]


@dataclass(frozen=True)
class ListedSession:
    """A session's row with its timestamps (``SessionState`` carries neither)."""

    state: SessionState
    created_at: datetime
    updated_at: datetime


def _aware(value: datetime) -> datetime:
    # SQLite hands back naive datetimes; every stored time is UTC.
    return value if value.tzinfo else value.replace(tzinfo=UTC)


async def recent_sessions(
    store: SessionStore,
    *,
    status: str | None = None,
    agent_type: str | None = None,
    limit: int = 20,
) -> list[ListedSession]:
    """The most recently updated sessions, newest first (ties by session id)."""
    query = states.select().order_by(states.c.updated_at.desc(), states.c.session_id).limit(limit)
    if status:
        query = query.where(states.c.status == status)
    if agent_type:
        query = query.where(states.c.agent_type == agent_type)
    async with store.transaction() as conn:
        rows = (await conn.execute(query)).all()
    return [
        ListedSession(session_row.decode(r._mapping), _aware(r.created_at), _aware(r.updated_at))
        for r in rows
    ]
