"""SQLite's side of the store's methods: its transactions and its reads (``dialect.Paths``).

Every write is sent when it is made, and every statement is SQLAlchemy Core's. A store
transaction takes the database's write lock as it opens (``sqlite.hold_writes``), so what it
reads holds until it commits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..core.events import SessionEvent
from ..core.messages import Message
from ..core.session import SessionState
from ..errors import SessionNotFoundError
from . import row as session_row
from ._sql.sqlite import CHECKPOINT_BY_ID, STATE_BY_ID, STATES_BY_IDS, USAGE_INSERT
from .batch import CHECKPOINTS, EVENTS, MESSAGES, STATES, WriteBatch
from .engine import StoreEngine, bind, unbind
from .history import LIVE_MESSAGE
from .schema import checkpoints, events, messages, states
from .sessions import descendants

__all__ = ["SQLitePaths"]

T = TypeVar("T")


class SQLitePaths:
    """The store's methods on SQLite, where they differ from Postgres's."""

    __slots__ = ("_db",)

    #: Usage rows whose ``dedupe_key`` exists already are skipped.
    usage_insert: sa.Executable = USAGE_INSERT

    def __init__(self, db: StoreEngine) -> None:
        self._db = db

    async def attempt(
        self,
        body: Callable[[], Awaitable[T]],
        *,
        committed: Callable[[WriteBatch], None],
    ) -> T:
        """One attempt of ``transact``: the write lock taken as it opens, the transaction
        bound to the task, every write sent as it is made (``committed``: for Postgres's
        queue, of which SQLite has none)."""
        async with self._db.begin() as conn:
            token = bind(conn)
            try:
                return await body()
            finally:
                unbind(token)

    # -- session rows -------------------------------------------------------------------------

    async def load(self, session_id: str, conn: AsyncConnection | None) -> SessionState | None:
        """The session, or ``None``."""
        async with self._db.read(conn) as c:
            row = (await c.execute(STATE_BY_ID, {"sid": session_id})).first()
        return session_row.decode(row._mapping) if row is not None else None

    async def load_many(
        self, ids: list[str], conn: AsyncConnection | None
    ) -> dict[str, SessionState]:
        """The sessions that exist among ``ids``."""
        async with self._db.read(conn) as c:
            rows = (await c.execute(states.select().where(states.c.session_id.in_(ids)))).all()
        return {s.session_id: s for s in (session_row.decode(r._mapping) for r in rows)}

    async def lock(self, ids: list[str], conn: AsyncConnection) -> dict[str, SessionState]:
        """The rows (the transaction holds the write lock since it opened)."""
        rows = (await conn.execute(STATES_BY_IDS, {"ids": ids})).all()
        return {s.session_id: s for s in (session_row.decode(r._mapping) for r in rows)}

    async def tree(self, session_id: str, conn: AsyncConnection | None) -> list[SessionState]:
        """The session, then the rest of its root's tree but the root."""
        top = await self.load(session_id, conn)
        if top is None:
            raise SessionNotFoundError(f"No session {session_id!r}", sessionId=session_id)
        below = await descendants(self._db, top.root_session_id, conn)
        return [top, *(s for s in below if s.session_id != session_id)]

    # -- the conversation ---------------------------------------------------------------------

    async def load_messages(self, session_id: str, conn: AsyncConnection | None) -> list[Message]:
        """The live conversation, oldest first."""
        async with self._db.read(conn, (MESSAGES,)) as c:
            rows = (
                await c.execute(
                    sa.select(messages.c.role, messages.c.content)
                    .where(messages.c.session_id == session_id, LIVE_MESSAGE)
                    .order_by(messages.c.message_id)
                )
            ).all()
        return [Message.from_row(r.role, r.content) for r in rows]

    async def step_inputs(
        self, session_id: str, slot: str, conn: AsyncConnection | None
    ) -> tuple[SessionState, dict[str, Any] | None, list[Message]]:
        """A model step's inputs, on one connection."""
        recorded = (
            sa.select(checkpoints.c.state)
            .where(checkpoints.c.checkpoint_id == slot)
            .scalar_subquery()
            .label("recorded_state")
        )
        async with self._db.read(conn, (STATES, CHECKPOINTS, MESSAGES)) as c:
            row = (
                await c.execute(
                    sa.select(states, recorded).where(states.c.session_id == session_id)
                )
            ).first()
            if row is None:
                raise SessionNotFoundError(f"No session {session_id!r}", sessionId=session_id)
            done = row._mapping["recorded_state"]
            history = [] if done is not None else await self.load_messages(session_id, c)
        return session_row.decode(row._mapping), done, history

    async def resume_inputs(
        self, session_id: str, ids: list[str], conn: AsyncConnection | None
    ) -> tuple[dict[str, SessionState], list[Message]]:
        """A woken turn's rows and its own conversation, on one connection."""
        async with self._db.read(conn, (STATES, MESSAGES)) as c:
            found = await self.load_many(ids, c)
            history = await self.load_messages(session_id, c)
        return found, history

    async def resume_recorded(
        self, session_id: str, ids: list[str], slot: str
    ) -> tuple[dict[str, Any] | None, dict[str, SessionState], list[Message]]:
        """The recorded state of ``slot`` with a woken turn's rows and conversation, on one
        connection."""
        async with self._db.read(None, (STATES, MESSAGES, CHECKPOINTS)) as c:
            found = await self.load_many(ids, c)
            done = await self.get_checkpoint(slot, c) if session_id in found else None
            history = await self.load_messages(session_id, c)
        return (None if done is None else done["state"]), found, history

    # -- events -------------------------------------------------------------------------------

    async def insert_events(
        self,
        c: AsyncConnection,
        session_id: str,
        run_id: str | None,
        new: Sequence[dict[str, Any]],
        now: datetime,
    ) -> int:
        """Append events on ``c`` now; the last sequence number (taken from the row)."""
        last = (
            await c.execute(
                states.update()
                .where(states.c.session_id == session_id)
                .values(event_seq=states.c.event_seq + len(new))
                .returning(states.c.event_seq)
            )
        ).scalar_one()
        first = last - len(new) + 1
        await c.execute(
            events.insert(),
            [
                {
                    "session_id": session_id,
                    "sequence": first + i,
                    "run_id": run_id,
                    "type": e["type"],
                    "data": e.get("data", {}),
                    "created_at": now,
                }
                for i, e in enumerate(new)
            ],
        )
        return int(last)

    async def read_events(
        self, session_id: str, after: int, limit: int, conn: AsyncConnection | None
    ) -> list[SessionEvent]:
        """Events with ``sequence > after``, in order."""
        async with self._db.read(conn, (EVENTS,)) as c:
            rows = (
                await c.execute(
                    events.select()
                    .where(events.c.session_id == session_id, events.c.sequence > after)
                    .order_by(events.c.sequence)
                    .limit(limit)
                )
            ).all()
        return [
            SessionEvent(
                sequence=r.sequence,
                type=r.type,
                run_id=r.run_id,
                session_id=r.session_id,
                data=r.data,
            )
            for r in rows
        ]

    # -- checkpoints --------------------------------------------------------------------------

    async def get_checkpoint(
        self, checkpoint_id: str, conn: AsyncConnection | None
    ) -> dict[str, Any] | None:
        """One checkpoint by id, or ``None``."""
        async with self._db.read(conn, (CHECKPOINTS,)) as c:
            row = (await c.execute(CHECKPOINT_BY_ID, {"checkpoint_id": checkpoint_id})).first()
        return dict(row._mapping) if row is not None else None
