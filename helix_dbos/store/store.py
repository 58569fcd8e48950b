"""The async, typed session store: ``SessionStore``, the one object the runtime queries.

Every method joins the unit of work bound to the running task (``transact``), if any, or runs
on its own: callers say what they read and write, never on which connection or how.

``SessionStore`` is a facade: each of its jobs is a module of its own, named after it.

* ``engine.py``: the engine, Postgres's lean pools, the transaction bound to the task;
* ``transact.py``: ``transact`` (one transaction, retried whole) and ``patience``;
* ``sessions.py``: session rows, their compare-and-swap ``save``; ``swap.py``: ``update``
  (read, mutate, swap), ``NoChange`` and the ``guard`` fence; ``unit.py``: the rows a
  unit of work read, which its updates swap from;
* ``conversation.py``, ``events.py``, ``usage.py``, ``checkpoints.py``: the other tables;
* ``limits.py``: the limit on a row's size;
* ``dialect.py``: the one dispatch on the database, picked here once: the backend (each
  dialect's named statements, ``_sql/``, and the behaviours that differ) and the paths,
  ``pg_paths.py`` (Postgres: writes queued and sent as one statement before COMMIT,
  ``batch.py``; the hot reads on the driver connection, ``pg.py``) or ``sqlite_paths.py``
  (SQLite: every write sent when it is made);
* ``fleet_tables.py``, ``dbos_tables.py``: the fleet's and DBOS's tables, ``fleet`` and
  ``dbos`` here.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..core.clock import now_ms  # re-exported: older imports read it from here
from ..core.events import SessionEvent
from ..core.messages import Message
from ..core.session import SessionState
from ..errors import SessionNotFoundError
from . import checkpoints, conversation, events, sessions, swap, unit, usage
from .batch import WriteBatch
from .dbos_tables import DbosTables
from .dialect import backend_for, paths_for
from .engine import StoreEngine, bound, open_engine
from .fleet_tables import FleetTables
from .swap import Fenced, NoChange, guard
from .transact import (
    OWNERSHIP_ATTEMPTS,
    PENDING_CLEAR_ATTEMPTS,
    REQUEST_PATIENCE_SECONDS,
    RetryTransaction,
    patience,
    read_retried,
    transact,
)
from .usage import UsageRow

__all__ = [
    "OWNERSHIP_ATTEMPTS",
    "PENDING_CLEAR_ATTEMPTS",
    "REQUEST_PATIENCE_SECONDS",
    "Fenced",
    "NoChange",
    "RetryTransaction",
    "SessionStore",
    "UsageRow",
    "guard",
    "now_ms",
    "patience",
]

T = TypeVar("T")


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
        self.backend = backend_for(self.dialect)
        """The dialect's statements and behaviours, picked once (``dialect.Backend``)."""
        self._db = StoreEngine(engine, self.backend)
        self._paths = paths_for(self._db)
        self.fleet = FleetTables(self.backend)
        """The fleet's tables (``fleet_tables.py``), in a ``reading`` or ``writing`` block."""
        self.dbos = DbosTables(self.backend, self._db)
        """DBOS's tables as the fleet and the launch read them (``dbos_tables.py``)."""
        self.on_events: events.EventsCommitted | None = None
        """Called with the sessions whose events a ``transact`` wrote, once it committed
        (Postgres): the runtime wakes its own streams of them at once (``EventSignals``)."""

    @property
    def many_writers(self) -> bool:
        """Whether the database takes several writers at once (Postgres: row locks), so that
        work may commit beside a turn's own commits; SQLite takes one writer at a time."""
        return self._db.lean is not None

    @classmethod
    def from_url(
        cls, database_url: str, *, max_state_bytes: int | None = None, pool_size: int = 10
    ) -> SessionStore:
        """A store on a user-facing database URL (``postgresql://``, ``sqlite:///``)."""
        return cls(open_engine(database_url, pool_size), max_state_bytes=max_state_bytes)

    async def close(self) -> None:
        """Dispose of the engine's connections."""
        await self._db.close()

    async def read_statement(
        self, sql: str, params: tuple[Any, ...] | dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """Postgres: run one statement that only reads, on its own (autocommit, on the read
        connections), and return its rows: no transaction, no checkout of SQLAlchemy's pool,
        prepared once per connection with a generic plan. For a list a page of which is one
        statement (the decision record's)."""
        assert self._db.lean is not None, "read_statement is for Postgres"
        return await self._db.lean.fetch(sql, params)

    async def write_statement(
        self, sql: str, params: tuple[Any, ...] | dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """Postgres: run one statement that writes, alone in its own transaction (autocommit,
        on the commit connections), and return its rows. For a write that a single statement
        decides whole (the deadline keeper's claim of a page); not retried: its caller tries
        again later.
        """
        assert self._db.lean_tx is not None, "write_statement is for Postgres"
        return await self._db.lean_tx.fetch(sql, params)

    # -- transactions -----------------------------------------------------------------------

    def transaction(
        self, conn: AsyncConnection | None = None
    ) -> AbstractAsyncContextManager[AsyncConnection]:
        """Join ``conn``'s transaction (or the bound one), or open (and commit) a new one.

        A new transaction here is NOT retried; use ``transact`` for anything that must survive
        a lost race or a database fault.
        """
        return self._db.transaction(conn)

    #: Within this block, a ``save`` of ``session_id`` also sets its checkpoint pointer to
    #: ``checkpoint_id`` (``checkpoints.pointing``).
    pointing = staticmethod(checkpoints.pointing)

    def reading(self) -> AbstractAsyncContextManager[None]:
        """Within this block, the reads of the store's own functions (``history.py``,
        ``fleet_tables.py``, ``dbos_tables.py``) join the unit of work bound to the task, or
        share one autocommit connection of their own."""
        return self._db.reading()

    def writing(self) -> AbstractAsyncContextManager[None]:
        """One transaction bound to the task for the block (the fleet's tables,
        ``fleet_tables.py``): committed when it ends, NOT retried (its caller's next pass
        tries again); use ``transact`` for anything that must survive a lost race or a fault."""
        return self._db.writing()

    @staticmethod
    def bound() -> AsyncConnection | None:
        """The transaction bound to the running task by ``transact``, if any."""
        return bound()

    async def transact(
        self,
        body: Callable[[], Awaitable[T]],
        *,
        read: Sequence[SessionState] = (),
        attempts: int = PENDING_CLEAR_ATTEMPTS,
        retry_event: str | None = None,
        failed_event: str | None = None,
        log_fields: dict[str, Any] | None = None,
    ) -> T:
        """Run ``body`` as one unit of work: every store call it makes joins it, and it
        commits whole or not at all.

        The body says what it reads and writes; the store decides how. On Postgres the unit
        runs on a driver connection of its own, its writes queued and sent as one statement
        before COMMIT (with no BEGIN or COMMIT when that statement is all it sends), its reads
        sent apart while it has written nothing; a body that needs a statement of
        SQLAlchemy's runs again, whole, on SQLAlchemy. On SQLite it takes the write lock as
        it opens. ``read``: session rows the caller read before the unit began; the unit's
        first ``update`` of each swaps from it instead of reading it again, locked, and may
        change it in place (the caller hands it over; ``unit.py``).

        The whole unit is retried: up to ``attempts`` times on a lost compare-and-swap race
        (jittered backoff), and on a transient database fault with backoff until the database
        is back or the caller's ``patience`` is spent. ``body`` must therefore be safe to run
        several times: it writes only through the store. Inside an enclosing unit it simply
        joins (the outer one retries).

        Raises:
            StaleStateError: every attempt lost its race (logged as ``failed_event``).
            StoreUnavailableError: the database stayed unreachable past the patience.
            Fenced: a guard failed; nothing was written.
        """
        return await transact(
            self._paths,
            body,
            read=read,
            attempts=attempts,
            retry_event=retry_event,
            failed_event=failed_event,
            log_fields=log_fields,
            committed=self._committed,
        )

    @staticmethod
    def read_earlier(states: Iterable[SessionState]) -> None:
        """Within a unit of work: ``states`` are session rows the caller read (before the
        unit began, or in it, unlocked). The unit's next ``update`` of each swaps from it
        instead of reading it again, locked, and may change it in place: the caller hands it
        over (see ``transact``'s ``read``). Only in the unit's first attempt: a retried one
        reads every row it updates."""
        unit.remember(states)

    def _committed(self, batch: WriteBatch) -> None:
        events.committed(batch, self.on_events)

    # -- sessions ---------------------------------------------------------------------------

    async def create_session(self, state: SessionState) -> SessionState:
        """Insert a new session row (version 0)."""
        unit.forget(state.session_id)
        return await sessions.create(self._db, state, None)

    @read_retried
    async def load(self, session_id: str) -> SessionState | None:
        """The session, or ``None``."""
        return await self._paths.load(session_id, None)

    async def get(self, session_id: str) -> SessionState:
        """The session.

        Raises:
            SessionNotFoundError: no such session.
        """
        state = await self.load(session_id)
        if state is None:
            raise SessionNotFoundError(f"No session {session_id!r}", sessionId=session_id)
        return state

    @read_retried
    async def load_many(self, session_ids: Iterable[str]) -> dict[str, SessionState]:
        """The sessions that exist among ``session_ids``."""
        return await self._paths.load_many(list(dict.fromkeys(session_ids)), None)

    async def save(self, state: SessionState) -> SessionState:
        """Write ``state`` if the row is still at ``state.version``; returns it at version + 1.

        Raises:
            StaleStateError: another writer changed the row first.
        """
        return await self._save(state, None)

    async def _save(self, state: SessionState, conn: AsyncConnection | None) -> SessionState:
        unit.forget(state.session_id)  # written: a later update of it reads it
        return await sessions.save(self._db, state, conn, max_state_bytes=self.max_state_bytes)

    async def update(
        self,
        session_ids: Sequence[str],
        mutate: Callable[[dict[str, SessionState]], T],
        *,
        attempts: int = OWNERSHIP_ATTEMPTS,
        retry_event: str | None = None,
        failed_event: str | None = None,
    ) -> tuple[dict[str, SessionState], T]:
        """Read-modify-write one or more session rows atomically, compare-and-swap on versions.

        In a unit of work handed the rows as read earlier (``transact(read=...)``,
        ``read_earlier``), the swap starts from them instead of reading them again
        (``unit.py``).

        ``mutate`` gets the current states by id (it may change them in place) and returns a
        value; it raises ``NoChange(value)`` to return without writing, or ``Fenced`` to roll
        the whole transaction back. ``mutate`` must be PURE: it may run several times (each
        retry reads the rows again), so it reports through its return value, never through
        outside state.

        Inside a unit of work (``transact``) this is one attempt, and a lost race raises ``StaleStateError`` for the enclosing ``transact`` to
        retry as a whole. On its own it runs in ``transact`` with ``attempts``.

        Raises:
            SessionNotFoundError: a session does not exist.
            StaleStateError: the retries were exhausted (logged as ``failed_event``).
        """
        ids = list(dict.fromkeys(session_ids))
        once = functools.partial(
            swap.update_once, ids, mutate, lock=self._paths.lock, save=self._save
        )
        if bound() is not None:
            return await once()
        return await self.transact(
            once,
            attempts=attempts,
            retry_event=retry_event,
            failed_event=failed_event,
            log_fields={"sessionIds": ids},
        )

    @read_retried
    async def list_sessions(
        self,
        *,
        status: str | None = None,
        agent_type: str | None = None,
        limit: int = 50,
    ) -> list[SessionState]:
        """Recent sessions, newest first."""
        return await sessions.recent(
            self._db, status=status, agent_type=agent_type, limit=limit, conn=None
        )

    @read_retried
    async def settled_before(
        self,
        cutoff: datetime,
        *,
        active: bool,
        workflow_ids: Sequence[str] | None = None,
        limit: int = 500,
    ) -> list[SessionState]:
        """Sessions last written before ``cutoff``: the active ones (``active``) that are not
        hibernated (those have no workflow to judge), or the ended ones whose workflow is
        among ``workflow_ids`` (what the reconciler inspects)."""
        return await sessions.settled_before(
            self._db, cutoff, active=active, workflow_ids=workflow_ids, limit=limit, conn=None
        )

    @read_retried
    async def descendants(self, root_session_id: str) -> list[SessionState]:
        """Every session of a tree except the root, parents before children."""
        return await sessions.descendants(self._db, root_session_id, None)

    @read_retried
    async def tree(self, session_id: str) -> list[SessionState]:
        """The session, then every other session of its root's tree but the root, parents
        before children (in one statement on Postgres).

        Raises:
            SessionNotFoundError: no such session.
        """
        return await self._paths.tree(session_id, None)

    # -- messages ---------------------------------------------------------------------------

    async def append_messages(
        self,
        session_id: str,
        run_id: str | None,
        new: Sequence[Message],
    ) -> None:
        """Append messages in order. A second tool result for a call fails in the database."""
        await conversation.append_messages(self._db, session_id, run_id, new, None)

    @read_retried
    async def load_messages(self, session_id: str) -> list[Message]:
        """The session's conversation, oldest first (rows a rewind took out are skipped)."""
        return await self._paths.load_messages(session_id, None)

    @read_retried
    async def step_inputs(
        self, session_id: str, slot: str
    ) -> tuple[SessionState, dict[str, Any] | None, list[Message]]:
        """What a model step reads before it calls the model, on one connection: the session,
        the recorded result of ``slot`` if its commit landed (then no history is read), and
        the conversation.

        Raises:
            SessionNotFoundError: no such session.
        """
        return await self._paths.step_inputs(session_id, slot, None)

    @read_retried
    async def resume_inputs(
        self,
        session_id: str,
        session_ids: Sequence[str],
    ) -> tuple[dict[str, SessionState], list[Message]]:
        """What a turn woken from its park reads, on one connection: the rows of
        ``session_ids`` (its own and its root's) and its own live conversation.

        Raises:
            SessionNotFoundError: ``session_id`` does not exist.
        """
        rows, history = await conversation.resume_inputs(self._paths, session_id, session_ids, None)
        unit.remember(rows.values())
        return rows, history

    @read_retried
    async def resume_recorded(
        self, session_id: str, session_ids: Sequence[str], slot: str
    ) -> tuple[dict[str, Any] | None, tuple[dict[str, SessionState], list[Message]] | None]:
        """A hibernated turn's take-up, in one read (one statement on Postgres): the recorded
        state of ``slot`` (its hibernate commit's checkpoint; ``None`` if it did not commit),
        and what ``resume_inputs`` reads (``None`` when ``session_id``'s row is missing, and
        the checkpoint is then read on its own)."""
        ids = list(dict.fromkeys([session_id, *session_ids]))
        done, states, history = await self._paths.resume_recorded(session_id, ids, slot)
        if session_id not in states:
            recorded = await self._paths.get_checkpoint(slot, None)
            return (None if recorded is None else recorded["state"]), None
        return done, (states, history)

    # -- events -----------------------------------------------------------------------------

    async def append_events(
        self,
        session_id: str,
        run_id: str | None,
        new: Sequence[dict[str, Any]],
    ) -> int:
        """Append events to the session's stream; returns the last sequence number (0 when
        the transaction's flush numbers them: see ``store/batch.py``).

        The sequence comes from the session row, so concurrent writers are serialized by
        its row lock and a reader never sees a gap fill in later.
        """
        return await events.append_events(self._db, self._paths, session_id, run_id, new, None)

    @read_retried
    async def read_events(
        self,
        session_id: str,
        after: int = 0,
        limit: int = 1000,
    ) -> list[SessionEvent]:
        """Events with ``sequence > after``, in order."""
        return await self._paths.read_events(session_id, after, limit, None)

    # -- usage ------------------------------------------------------------------------------

    async def record_usage(self, rows: Sequence[UsageRow]) -> None:
        """Insert usage rows; a row whose ``dedupe_key`` exists is skipped (replay-safe)."""
        await usage.record_usage(self._db, self._paths, rows, None)

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
        created_at: datetime | None = None,
        pointed: bool = False,
    ) -> str:
        """Write a checkpoint and point the session at it, unless it points at a newer one.

        ``message_count`` defaults to the session's messages as the transaction sees them. A
        given ``checkpoint_id`` that exists already fails with ``IntegrityError`` (the
        runtime's exactly-once marker for a step's writes). ``created_at``: the stamp, now
        if not given; an aware datetime, kept as its instant in UTC (a naive one raises
        ``ValueError``: it names no instant).
        """
        return await checkpoints.write_checkpoint(
            self._db,
            session_id,
            run_id,
            step_count=step_count,
            state=state,
            message_count=message_count,
            checkpoint_id=checkpoint_id,
            created_at=created_at,
            pointed=pointed,
            conn=None,
        )

    @read_retried
    async def get_checkpoint(self, checkpoint_id: str) -> dict[str, Any] | None:
        """One checkpoint by id, or ``None``."""
        return await self._paths.get_checkpoint(checkpoint_id, None)

    @read_retried
    async def latest_checkpoint(self, session_id: str) -> dict[str, Any] | None:
        """The checkpoint the session points at (never "highest step count")."""
        return await checkpoints.latest_checkpoint(self._db, session_id, None)
