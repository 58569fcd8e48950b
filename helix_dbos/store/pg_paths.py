"""Postgres's side of the store's methods: its transactions and its reads (``dialect.Paths``).

A transaction's writes are queued and sent as ONE statement right before COMMIT
(``batch.py``); a read in it sends them first, so the transaction reads its own writes. The
hot reads go to psycopg directly (``pg.py``): in the caller's transaction when there is one,
else on a ``pg.LeanPool`` connection of their own.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..core.events import SessionEvent
from ..core.messages import Message
from ..core.session import SessionState
from ..errors import SessionNotFoundError
from . import pg, unit
from ._sql.postgres import APPEND_EVENTS, USAGE_INSERT
from .batch import ALL, CHECKPOINTS, EVENTS, MESSAGES, STATES, WriteBatch, begin, end, settle
from .batch import current_batch as batch_of
from .engine import StoreEngine, bind, bound, unbind

__all__ = ["PostgresPaths"]

T = TypeVar("T")


async def _untouched(conn: AsyncConnection) -> bool:
    """Whether ``conn``'s transaction has neither sent nor queued anything yet."""
    batch = batch_of(conn)
    return (batch is None or not batch.dirty(ALL)) and await pg.sent_nothing(conn)


async def _queued(conn: AsyncConnection, body: Callable[[], Awaitable[T]]) -> tuple[T, WriteBatch]:
    """Run ``body`` in ``conn``'s transaction, bound to the task, with its writes queued; then
    send them, in one statement (the whole transaction, if the body sent nothing else)."""
    token = bind(conn)
    batch, queueing = begin(conn)
    try:
        value = await body()
        await batch.flush(last=True)
    finally:
        end(queueing)
        unbind(token)
    return value, batch


class PostgresPaths:
    """The store's methods on Postgres, where they differ from SQLite's."""

    __slots__ = ("_db",)

    #: Usage rows whose ``dedupe_key`` exists already are skipped.
    usage_insert: sa.Executable = USAGE_INSERT

    def __init__(self, db: StoreEngine) -> None:
        self._db = db

    # -- transactions -------------------------------------------------------------------------

    async def attempt(
        self,
        body: Callable[[], Awaitable[T]],
        *,
        committed: Callable[[WriteBatch], None],
    ) -> T:
        """One attempt of ``transact``: its writes queued and sent as one statement before
        COMMIT, on a driver connection of its own (``pg.LeanTransaction``: a third of a
        one-statement commit's CPU). A body that asks for a statement of SQLAlchemy's
        (``pg.NeedsEngine``) has its attempt rolled back and run again, whole, on one of
        SQLAlchemy's connections: the body may run several times anyway."""
        if self._db.lean_tx is not None:
            try:
                return await self._lean_attempt(body, committed)
            except pg.NeedsEngine:
                unit.drop()
        async with self._db.engine.begin() as conn:
            value, batch = await _queued(conn, body)
        committed(batch)
        return value

    async def _lean_attempt(
        self,
        body: Callable[[], Awaitable[T]],
        committed: Callable[[WriteBatch], None],
    ) -> T:
        assert self._db.lean_tx is not None
        async with self._db.lean_tx.lease() as driver:
            tx = pg.LeanTransaction(driver)
            try:
                # The store's functions take an AsyncConnection; on this one, only ``pg`` runs.
                value, batch = await _queued(cast(AsyncConnection, tx), body)
                await tx.commit()
            except BaseException:
                await tx.rollback()
                raise
        committed(batch)
        return value

    async def _fetch(
        self,
        conn: AsyncConnection | None,
        sql: str,
        params: tuple[Any, ...] | dict[str, Any],
        reads: Iterable[str] = (STATES,),
    ) -> list[tuple[Any, ...]]:
        """A read of one statement: in ``conn``'s transaction (or the bound one), the queued
        writes to ``reads`` sent first; else on its own (``pg.LeanPool``).

        A transaction that has sent and queued nothing yet reads on its own too, so the read
        does not open it (one that is then only its flush goes without BEGIN and COMMIT:
        ``pg.fetch_last``). Under READ COMMITTED that read sees what the transaction's own
        first statement would, and holds nothing either way (``lock`` reads in it).
        """
        joined = conn if conn is not None else bound()
        if joined is not None and not await _untouched(joined):
            await settle(joined, reads)
            return await pg.fetch(joined, sql, params)
        assert self._db.lean is not None
        return await self._db.lean.fetch(sql, params)

    # -- session rows -------------------------------------------------------------------------

    async def load(self, session_id: str, conn: AsyncConnection | None) -> SessionState | None:
        """The session, or ``None``."""
        found = await self._fetch(conn, pg.STATE_BY_ID, (session_id,))
        return pg.state_from_tuple(found[0]) if found else None

    async def load_many(
        self, ids: list[str], conn: AsyncConnection | None
    ) -> dict[str, SessionState]:
        """The sessions that exist among ``ids``."""
        found = await self._fetch(conn, pg.STATES_BY_IDS, (ids,))
        return {s.session_id: s for s in map(pg.state_from_tuple, found)}

    async def lock(self, ids: list[str], conn: AsyncConnection) -> dict[str, SessionState]:
        """The rows, locked for this transaction (in id order: no deadlock)."""
        await settle(conn, (STATES,))
        found = await pg.fetch(conn, pg.LOCK_STATES, (ids,))
        batch = batch_of(conn)
        if batch is not None:
            for row in found:  # locked: their event sequences cannot move under this transaction
                batch.hold(row[0], row[pg.EVENT_SEQ])
        return {s.session_id: s for s in map(pg.state_from_tuple, found)}

    async def tree(self, session_id: str, conn: AsyncConnection | None) -> list[SessionState]:
        """The session, then the rest of its root's tree but the root, in one statement."""
        found = await self._fetch(conn, pg.TREE, {"sid": session_id})
        if not found:
            raise SessionNotFoundError(f"No session {session_id!r}", sessionId=session_id)
        return [pg.state_from_tuple(row) for row in found]

    # -- the conversation ---------------------------------------------------------------------

    async def load_messages(self, session_id: str, conn: AsyncConnection | None) -> list[Message]:
        """The live conversation, oldest first."""
        found = await self._fetch(conn, pg.LIVE_MESSAGES, (session_id,), (MESSAGES,))
        return [Message.from_row(role, content) for role, content in found]

    async def step_inputs(
        self, session_id: str, slot: str, conn: AsyncConnection | None
    ) -> tuple[SessionState, dict[str, Any] | None, list[Message]]:
        """A model step's inputs, in one statement."""
        found = await self._fetch(
            conn, pg.STEP_INPUTS, (slot, session_id), (STATES, CHECKPOINTS, MESSAGES)
        )
        if not found:
            raise SessionNotFoundError(f"No session {session_id!r}", sessionId=session_id)
        *selected, done, rows = found[0]
        history = [Message.from_row(r, c) for r, c in rows or ()]
        return pg.state_from_tuple(selected), done, history

    async def resume_inputs(
        self, session_id: str, ids: list[str], conn: AsyncConnection | None
    ) -> tuple[dict[str, SessionState], list[Message]]:
        """A woken turn's rows and its own conversation, in one statement."""
        found = await self._fetch(conn, pg.RESUME_INPUTS, (session_id, ids), (STATES, MESSAGES))
        rows: list[tuple[Any, ...]] = []
        history: list[Message] = []
        for *selected, history_rows in found:
            rows.append(tuple(selected))
            if selected[0] == session_id:
                history = [Message.from_row(r, m) for r, m in history_rows or ()]
        return {s.session_id: s for s in map(pg.state_from_tuple, rows)}, history

    async def resume_recorded(
        self, session_id: str, ids: list[str], slot: str
    ) -> tuple[dict[str, Any] | None, dict[str, SessionState], list[Message]]:
        """The recorded state of ``slot`` with a woken turn's rows and conversation, in one
        statement (the state is read on the owner's row: none when that row is missing)."""
        found = await self._fetch(
            None,
            pg.RESUME_INPUTS_RECORDED,
            {"sid": session_id, "ids": ids, "slot": slot},
            (STATES, MESSAGES, CHECKPOINTS),
        )
        rows: list[tuple[Any, ...]] = []
        history: list[Message] = []
        done: dict[str, Any] | None = None
        for *selected, history_rows, state in found:
            rows.append(tuple(selected))
            if selected[0] == session_id:
                history = [Message.from_row(r, m) for r, m in history_rows or ()]
                done = state
        return done, {s.session_id: s for s in map(pg.state_from_tuple, rows)}, history

    # -- events -------------------------------------------------------------------------------

    async def insert_events(
        self,
        c: AsyncConnection,
        session_id: str,
        run_id: str | None,
        new: Sequence[dict[str, Any]],
        now: datetime,
    ) -> int:
        """Append events on ``c`` now; the last sequence number. One round trip: the
        sequence is taken and the rows inserted in one statement."""
        rows = await c.execute(
            APPEND_EVENTS,
            {
                "sid": session_id,
                "run": run_id,
                "n": len(new),
                "now": now,
                "events": json.dumps([{"type": e["type"], "data": e.get("data", {})} for e in new]),
            },
        )
        sequences = [r[0] for r in rows]
        if not sequences:
            raise sa.exc.NoResultFound(f"No session {session_id!r} to append events to")
        last = int(max(sequences))
        batch = batch_of(c)
        if batch is not None:
            batch.hold(session_id, last)  # the row is locked by that update now
        return last

    async def read_events(
        self, session_id: str, after: int, limit: int, conn: AsyncConnection | None
    ) -> list[SessionEvent]:
        """Events with ``sequence > after``, in order."""
        found = await self._fetch(conn, pg.EVENTS_AFTER, (session_id, after, limit), (EVENTS,))
        return [
            SessionEvent(sequence=n, type=t, run_id=r, session_id=session_id, data=d)
            for n, t, r, d in found
        ]

    # -- checkpoints --------------------------------------------------------------------------

    async def get_checkpoint(
        self, checkpoint_id: str, conn: AsyncConnection | None
    ) -> dict[str, Any] | None:
        """One checkpoint by id, or ``None``."""
        found = await self._fetch(conn, pg.CHECKPOINT_BY_ID, (checkpoint_id,), (CHECKPOINTS,))
        return dict(zip(pg.CHECKPOINT_COLUMNS, found[0], strict=True)) if found else None
