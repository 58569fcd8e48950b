"""The async, typed session store: every query the runtime runs lives here.

Each method takes an optional ``conn``. Without it the method runs in its own transaction; with
it the method joins the caller's transaction, which is how the runtime commits session writes
in the same transaction as a DBOS step checkpoint.

Updates to a session row are compare-and-swap on its ``version`` with bounded retries; a lost
race past the budget is a typed ``StaleStateError``, never a silent overwrite.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ..config import parse_database_url
from ..core.clock import now_ms  # re-exported: older imports read it from here
from ..core.events import SessionEvent
from ..core.messages import Message
from ..core.session import PendingCall, SessionState, Tombstone
from ..errors import SessionNotFoundError, StaleStateError, StateSizeExceededError
from ..observability.log import log_event
from .schema import checkpoints, events, messages, states, usage

__all__ = [
    "OWNERSHIP_ATTEMPTS",
    "PENDING_CLEAR_ATTEMPTS",
    "NoChange",
    "SessionStore",
    "UsageRow",
    "now_ms",
]

T = TypeVar("T")

#: CAS attempts for ownership writes (the seed's writeOwnership / writeBothPendingAndOwnership).
OWNERSHIP_ATTEMPTS = 3
#: CAS attempts for pending-entry clears (the seed's clearPending).
PENDING_CLEAR_ATTEMPTS = 5

UsageRow = dict[str, Any]
"""``{kind, source_type, source_name, value | data, session_id, run_id, timestamp, dedupe_key}``."""


class NoChange(Exception):  # a control-flow signal, not an error
    """Raised by an ``update`` mutation to return ``value`` without writing anything."""

    def __init__(self, value: Any) -> None:
        super().__init__("no change")
        self.value = value


def _now() -> datetime:
    return datetime.now(UTC)


def _set_sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # Serialize writers and wait out lock contention, as DBOS's own SQLite engines do.
    dbapi_conn.isolation_level = "IMMEDIATE"
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _keep_immediate_transactions(dialect: Any) -> None:
    """Keep SQLite transactions ``BEGIN IMMEDIATE`` whatever isolation level a caller sets.

    SQLAlchemy's SQLite dialect resets the driver to deferred ``BEGIN`` whenever an isolation
    level is applied (DBOS applies one on every transaction it opens). A deferred
    transaction that reads and then writes can fail at once with "database is locked" when
    another writer got in between; an immediate one waits its turn (busy_timeout).
    """
    original = dialect.set_isolation_level

    def set_isolation_level(dbapi_connection: Any, level: Any) -> None:
        original(dbapi_connection, level)
        if level != "AUTOCOMMIT":
            dbapi_connection.isolation_level = "IMMEDIATE"

    dialect.set_isolation_level = set_isolation_level


def _state_from_row(row: sa.Row[Any]) -> SessionState:
    m = row._mapping
    return SessionState(
        session_id=m["session_id"],
        agent_type=m["agent_type"],
        root_session_id=m["root_session_id"],
        parent_session_id=m["parent_session_id"],
        status=m["status"],
        run_id=m["run_id"],
        workflow_id=m["workflow_id"],
        version=m["version"],
        pending={
            k: PendingCall.model_validate(v)
            for k, v in (m["pending_client_tool_calls"] or {}).items()
        },
        ownership=dict(m["client_tool_call_ownership"] or {}),
        completed={
            k: Tombstone.model_validate(v)
            for k, v in (m["completed_client_tool_calls"] or {}).items()
        },
        metadata=dict(m["metadata"] or {}),
        error=m["error"],
        latest_checkpoint_id=m["latest_checkpoint_id"],
    )


def _state_values(state: SessionState) -> dict[str, Any]:
    return {
        "agent_type": state.agent_type,
        "root_session_id": state.root_session_id,
        "parent_session_id": state.parent_session_id,
        "status": state.status,
        "run_id": state.run_id,
        "workflow_id": state.workflow_id,
        "pending_client_tool_calls": {k: v.dump() for k, v in state.pending.items()},
        "client_tool_call_ownership": dict(state.ownership),
        "completed_client_tool_calls": (
            {k: v.dump() for k, v in state.completed.items()} if state.completed else None
        ),
        "metadata": state.metadata,
        "error": state.error,
        "latest_checkpoint_id": state.latest_checkpoint_id,
    }


class SessionStore:
    """Sessions, messages, events, usage and checkpoints over one SQLAlchemy async engine.

    Args:
        engine: an async engine on the database that holds the ``__agents_*`` tables.
        max_state_bytes: optional limit on a session's stored pending map (JSON bytes).
    """

    def __init__(self, engine: AsyncEngine, *, max_state_bytes: int | None = None) -> None:
        self.engine = engine
        self.max_state_bytes = max_state_bytes
        self.dialect = engine.dialect.name

    @classmethod
    def from_url(
        cls, database_url: str, *, max_state_bytes: int | None = None, pool_size: int = 10
    ) -> SessionStore:
        """A store on a user-facing database URL (``postgresql://``, ``sqlite:///``)."""
        urls = parse_database_url(database_url)
        if urls.is_sqlite:
            engine = create_async_engine(urls.async_)
            sa_event.listens_for(engine.sync_engine, "connect")(_set_sqlite_pragmas)
            _keep_immediate_transactions(engine.sync_engine.dialect)
        else:
            engine = create_async_engine(
                urls.async_,
                pool_size=pool_size,
                max_overflow=pool_size,
                # No pre-ping round trip on every checkout (it doubled a read's latency); a
                # dropped connection is invalidated on its first error, and old ones recycled.
                pool_recycle=1800,
            )
        return cls(engine, max_state_bytes=max_state_bytes)

    async def close(self) -> None:
        """Dispose of the engine's connections."""
        await self.engine.dispose()

    @asynccontextmanager
    async def _read(self, conn: AsyncConnection | None) -> AsyncIterator[AsyncConnection]:
        """Join ``conn``, or read on an autocommit connection (no BEGIN/COMMIT round trips)."""
        if conn is not None:
            yield conn
            return
        async with self.engine.connect() as new_conn:
            await new_conn.execution_options(isolation_level="AUTOCOMMIT")
            yield new_conn

    @asynccontextmanager
    async def transaction(
        self, conn: AsyncConnection | None = None
    ) -> AsyncIterator[AsyncConnection]:
        """Join ``conn``'s transaction, or open (and commit) a new one."""
        if conn is not None:
            yield conn
            return
        async with self.engine.begin() as new_conn:
            yield new_conn

    # -- sessions ---------------------------------------------------------------------------

    async def create_session(
        self, state: SessionState, conn: AsyncConnection | None = None
    ) -> SessionState:
        """Insert a new session row (version 0)."""
        now = _now()
        async with self.transaction(conn) as c:
            await c.execute(
                states.insert().values(
                    session_id=state.session_id,
                    version=0,
                    event_seq=0,
                    created_at=now,
                    updated_at=now,
                    **_state_values(state),
                )
            )
        return state.model_copy(update={"version": 0})

    async def load(
        self, session_id: str, conn: AsyncConnection | None = None
    ) -> SessionState | None:
        """The session, or ``None``."""
        async with self._read(conn) as c:
            row = (
                await c.execute(states.select().where(states.c.session_id == session_id))
            ).first()
        return _state_from_row(row) if row is not None else None

    async def get(self, session_id: str, conn: AsyncConnection | None = None) -> SessionState:
        """The session.

        Raises:
            SessionNotFoundError: no such session.
        """
        state = await self.load(session_id, conn)
        if state is None:
            raise SessionNotFoundError(f"No session {session_id!r}", sessionId=session_id)
        return state

    async def load_many(
        self, session_ids: Iterable[str], conn: AsyncConnection | None = None
    ) -> dict[str, SessionState]:
        """The sessions that exist among ``session_ids``."""
        ids = list(dict.fromkeys(session_ids))
        async with self._read(conn) as c:
            rows = (await c.execute(states.select().where(states.c.session_id.in_(ids)))).all()
        return {s.session_id: s for s in map(_state_from_row, rows)}

    async def save(self, state: SessionState, conn: AsyncConnection | None = None) -> SessionState:
        """Write ``state`` if the row is still at ``state.version``; returns it at version + 1.

        Raises:
            StaleStateError: another writer changed the row first.
        """
        self._check_size(state)
        async with self.transaction(conn) as c:
            result = await c.execute(
                states.update()
                .where(states.c.session_id == state.session_id, states.c.version == state.version)
                .values(version=states.c.version + 1, updated_at=_now(), **_state_values(state))
            )
        if result.rowcount != 1:
            raise StaleStateError(
                f"Session {state.session_id!r} changed since version {state.version}",
                sessionId=state.session_id,
            )
        return state.model_copy(update={"version": state.version + 1})

    async def update(
        self,
        session_ids: Sequence[str],
        mutate: Callable[[dict[str, SessionState]], T],
        *,
        attempts: int = OWNERSHIP_ATTEMPTS,
        conn: AsyncConnection | None = None,
        retry_event: str | None = None,
        failed_event: str | None = None,
    ) -> tuple[dict[str, SessionState], T]:
        """Read-modify-write one or more session rows atomically, compare-and-swap on versions.

        ``mutate`` gets the current states by id (it may change them in place) and returns a
        value; it raises ``NoChange(value)`` to return without writing. When another writer wins a race, the whole read-mutate-write is retried up to
        ``attempts`` times with jittered backoff.

        Raises:
            SessionNotFoundError: a session does not exist.
            StaleStateError: the retries were exhausted (logged as ``failed_event``).
        """
        ids = list(dict.fromkeys(session_ids))
        for attempt in range(1, attempts + 1):
            try:
                async with self._nested(conn) as c:
                    current = await self.load_many(ids, c)
                    missing = [i for i in ids if i not in current]
                    if missing:
                        raise SessionNotFoundError(
                            f"No session {missing[0]!r}", sessionId=missing[0]
                        )
                    before = {i: s.version for i, s in current.items()}
                    try:
                        value = mutate(current)
                    except NoChange as unchanged:
                        return current, unchanged.value
                    saved: dict[str, SessionState] = {}
                    for sid in ids:
                        state = current[sid]
                        state.version = before[sid]
                        saved[sid] = await self.save(state, c)
                    return saved, value
            except StaleStateError as exc:
                if attempt == attempts:
                    if failed_event:
                        log_event(failed_event, sessionIds=ids, attempts=attempts, error=str(exc))
                    raise StaleStateError(
                        f"Gave up after {attempts} compare-and-swap attempts on {ids}",
                        sessionIds=ids,
                        attempts=attempts,
                    ) from exc
                if retry_event:
                    log_event(retry_event, sessionIds=ids, attempt=attempt)
                await asyncio.sleep(random.uniform(0.001, 0.005) * attempt)
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def _nested(self, conn: AsyncConnection | None) -> AsyncIterator[AsyncConnection]:
        # Inside a caller's transaction a failed attempt rolls back to a savepoint only.
        if conn is None:
            async with self.engine.begin() as c:
                yield c
        else:
            async with conn.begin_nested():
                if self.dialect == "sqlite":
                    # A SAVEPOINT opens a deferred SQLite transaction; a read then a write in it
                    # fails at once ("database is locked") when another writer got in between.
                    # Take the write lock first (an empty UPDATE), waiting out busy writers.
                    await conn.execute(
                        states.update().where(sa.false()).values(version=states.c.version)
                    )
                yield conn

    def _check_size(self, state: SessionState) -> None:
        if self.max_state_bytes is None:
            return
        size = len(json.dumps({k: v.dump() for k, v in state.pending.items()}).encode())
        if size > self.max_state_bytes:
            raise StateSizeExceededError(
                f"The session's stored pending calls would be {size} bytes, over the "
                f"store's limit of {self.max_state_bytes}",
                cause="state",
                limitBytes=self.max_state_bytes,
                sizeBytes=size,
            )

    async def list_sessions(
        self,
        *,
        status: str | None = None,
        agent_type: str | None = None,
        limit: int = 50,
        conn: AsyncConnection | None = None,
    ) -> list[SessionState]:
        """Recent sessions, newest first."""
        query = states.select().order_by(states.c.updated_at.desc()).limit(limit)
        if status:
            query = query.where(states.c.status == status)
        if agent_type:
            query = query.where(states.c.agent_type == agent_type)
        async with self._read(conn) as c:
            return [_state_from_row(r) for r in (await c.execute(query)).all()]

    async def descendants(
        self, root_session_id: str, conn: AsyncConnection | None = None
    ) -> list[SessionState]:
        """Every session of a tree except the root, parents before children."""
        async with self._read(conn) as c:
            rows = (
                await c.execute(
                    states.select()
                    .where(
                        states.c.root_session_id == root_session_id,
                        states.c.session_id != root_session_id,
                    )
                    .order_by(states.c.created_at)
                )
            ).all()
        return [_state_from_row(r) for r in rows]

    # -- messages ---------------------------------------------------------------------------

    async def append_messages(
        self,
        session_id: str,
        run_id: str | None,
        new: Sequence[Message],
        conn: AsyncConnection | None = None,
    ) -> None:
        """Append messages in order. A second tool result for a call fails in the database."""
        if not new:
            return
        now = _now()
        async with self.transaction(conn) as c:
            await c.execute(
                messages.insert(),
                [
                    {
                        "session_id": session_id,
                        "role": m.role,
                        "tool_call_id": m.tool_call_id,
                        "content": m.to_row(),
                        "run_id": run_id,
                        "created_at": now,
                    }
                    for m in new
                ],
            )

    async def load_messages(
        self, session_id: str, conn: AsyncConnection | None = None
    ) -> list[Message]:
        """The session's conversation, oldest first."""
        async with self._read(conn) as c:
            rows = (
                await c.execute(
                    sa.select(messages.c.role, messages.c.content)
                    .where(messages.c.session_id == session_id)
                    .order_by(messages.c.message_id)
                )
            ).all()
        return [Message.from_row(r.role, r.content) for r in rows]

    # -- events -----------------------------------------------------------------------------

    async def append_events(
        self,
        session_id: str,
        run_id: str | None,
        new: Sequence[dict[str, Any]],
        conn: AsyncConnection | None = None,
    ) -> int:
        """Append events to the session's stream; returns the last sequence number.

        The sequence comes from the session row, so concurrent writers are serialized by
        its row lock and a reader never sees a gap fill in later.
        """
        if not new:
            return 0
        async with self.transaction(conn) as c:
            last = (
                await c.execute(
                    states.update()
                    .where(states.c.session_id == session_id)
                    .values(event_seq=states.c.event_seq + len(new))
                    .returning(states.c.event_seq)
                )
            ).scalar_one()
            first = last - len(new) + 1
            now = _now()
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
        self,
        session_id: str,
        after: int = 0,
        limit: int = 1000,
        conn: AsyncConnection | None = None,
    ) -> list[SessionEvent]:
        """Events with ``sequence > after``, in order."""
        async with self._read(conn) as c:
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

    # -- usage ------------------------------------------------------------------------------

    async def record_usage(
        self, rows: Sequence[UsageRow], conn: AsyncConnection | None = None
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
        async with self.transaction(conn) as c:
            stmt: sa.Executable
            if self.dialect == "postgresql":
                stmt = pg_dialect.insert(usage).on_conflict_do_nothing(
                    index_elements=["dedupe_key"]
                )
            else:
                stmt = sqlite_dialect.insert(usage).on_conflict_do_nothing(
                    index_elements=["dedupe_key"]
                )
            await c.execute(stmt, values)

    # -- checkpoints ------------------------------------------------------------------------

    async def write_checkpoint(
        self,
        session_id: str,
        run_id: str | None,
        *,
        step_count: int,
        state: dict[str, Any],
        message_count: int | None = None,
        checkpoint_id: str | None = None,
        conn: AsyncConnection | None = None,
    ) -> str:
        """Write a checkpoint and point the session at it (the most recently written one).

        ``message_count`` defaults to the session's messages as the transaction sees them. A
        given ``checkpoint_id`` that exists already fails with ``IntegrityError`` (the
        runtime's exactly-once marker for a step's writes).
        """
        checkpoint_id = checkpoint_id or f"cp_{uuid.uuid4().hex}"
        count: Any = message_count
        if count is None:
            count = (
                sa.select(sa.func.count())
                .select_from(messages)
                .where(messages.c.session_id == session_id)
                .scalar_subquery()
            )
        async with self.transaction(conn) as c:
            await c.execute(
                checkpoints.insert().values(
                    checkpoint_id=checkpoint_id,
                    session_id=session_id,
                    run_id=run_id,
                    step_count=step_count,
                    message_count=count,
                    state=state,
                    created_at=_now(),
                )
            )
            await c.execute(
                states.update()
                .where(states.c.session_id == session_id)
                .values(latest_checkpoint_id=checkpoint_id)
            )
        return checkpoint_id

    async def get_checkpoint(
        self, checkpoint_id: str, conn: AsyncConnection | None = None
    ) -> dict[str, Any] | None:
        """One checkpoint by id, or ``None``."""
        async with self._read(conn) as c:
            row = (
                await c.execute(
                    sa.select(checkpoints).where(checkpoints.c.checkpoint_id == checkpoint_id)
                )
            ).first()
        return dict(row._mapping) if row is not None else None

    async def latest_checkpoint(
        self, session_id: str, conn: AsyncConnection | None = None
    ) -> dict[str, Any] | None:
        """The checkpoint the session points at (never "highest step count")."""
        async with self._read(conn) as c:
            row = (
                await c.execute(
                    sa.select(checkpoints)
                    .join(states, states.c.latest_checkpoint_id == checkpoints.c.checkpoint_id)
                    .where(states.c.session_id == session_id)
                )
            ).first()
        return dict(row._mapping) if row is not None else None
