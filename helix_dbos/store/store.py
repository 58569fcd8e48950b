"""The async, typed session store: every query the runtime runs lives here.

Each method takes an optional ``conn``. Without it the method runs in its own transaction; with
it the method joins the caller's transaction, which is how the runtime commits session writes
in the same transaction as a DBOS step checkpoint.

Every transition of a session row is a compare-and-swap on its ``version``, guarded by what
the writer expects of the row (its run and status), in the same transaction as its effects.
``transact`` runs such a transaction and retries the WHOLE of it: on a lost race (a
``StaleStateError``), and on a transient database fault (a dropped connection, an admin
shutdown, a serialization failure) with backoff until the database is back or the caller's
patience runs out (then ``StoreUnavailableError``). A guard that fails (``Fenced``) rolls the
transaction back: nothing is written.

Inside ``transact`` (and inside a step's commit, see ``runtime/once.py``) the transaction is
bound to the running task: a store method called there without ``conn`` joins it, so a write
can never silently land outside the step's transaction.

On Postgres the writes of such a transaction whose caller needs nothing back from the database
(new rows, compare-and-swaps, messages, usage, events, checkpoints) are queued and sent as ONE
statement right before COMMIT (``batch.py``); a read in the transaction sends them first, so
the transaction reads its own writes. A lost compare-and-swap or a conflict (a duplicate
checkpoint id) then fails the transaction at that statement instead of at the write: the same
error, and nothing of the transaction lands. The hot reads and that statement go to psycopg
directly (``pg.py``). On SQLite every write is sent when it is made, as before.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ..config import parse_database_url
from ..core.clock import now_ms  # re-exported: older imports read it from here
from ..core.events import SessionEvent
from ..core.jitter import jitter
from ..core.messages import Message
from ..core.session import SessionState
from ..errors import (
    SessionNotFoundError,
    StaleStateError,
    StateSizeExceededError,
    StoreUnavailableError,
)
from ..observability.log import log_event
from . import pg, sqlite
from . import row as session_row
from .batch import (
    ALL,
    CHECKPOINTS,
    EVENTS,
    MESSAGES,
    STATE_COLUMNS,
    STATES,
    WriteBatch,
    begin,
    current_batch,
    end,
    settle,
)
from .faults import is_transient
from .history import LIVE_MESSAGE
from .schema import LIVE_ROW, checkpoints, events, messages, states, usage

__all__ = [
    "OWNERSHIP_ATTEMPTS",
    "PENDING_CLEAR_ATTEMPTS",
    "REQUEST_PATIENCE_SECONDS",
    "Fenced",
    "NoChange",
    "Prior",
    "RetryTransaction",
    "SessionStore",
    "UsageRow",
    "guard",
    "now_ms",
    "patience",
]

T = TypeVar("T")

#: CAS attempts for ownership writes (the seed's writeOwnership / writeBothPendingAndOwnership).
OWNERSHIP_ATTEMPTS = 3
#: CAS attempts for pending-entry clears (the seed's clearPending).
PENDING_CLEAR_ATTEMPTS = 5

UsageRow = dict[str, Any]
"""``{kind, source_type, source_name, value | data, session_id, run_id, timestamp, dedupe_key}``."""


#: How long a request (an HTTP call, a CLI command) waits out a database fault before it
#: answers ``store_unavailable``. Durable code (turns, the reconciler) waits for ever.
REQUEST_PATIENCE_SECONDS = 3.0

_patience: ContextVar[tuple[float | None] | None] = ContextVar("helix_store_patience", default=None)
"""The innermost ``patience`` block's seconds, boxed (``None``: outside any block)."""
_bound: ContextVar[AsyncConnection | None] = ContextVar("helix_store_tx", default=None)
_pointing: ContextVar[Pointing | None] = ContextVar("helix_store_pointing", default=None)


# The statements every transition runs, built once: SQLAlchemy then neither rebuilds them nor
# recomputes their cache keys on each call (a measurable share of a round trip's CPU).
_STATE_BY_ID = states.select().where(states.c.session_id == sa.bindparam("sid"))
_STATES_BY_IDS = states.select().where(states.c.session_id.in_(sa.bindparam("ids", expanding=True)))
_SAVE_STATE = (
    states.update()
    .where(
        states.c.session_id == sa.bindparam("b_session_id"),
        states.c.version == sa.bindparam("b_version"),
    )
    .values(
        version=states.c.version + 1,
        updated_at=sa.bindparam("b_updated_at", type_=states.c.updated_at.type),
        **{name: sa.bindparam(name, type_=states.c[name].type) for name in STATE_COLUMNS},
    )
)
_CHECKPOINT_BY_ID = sa.select(checkpoints).where(
    checkpoints.c.checkpoint_id == sa.bindparam("checkpoint_id")
)

_APPEND_EVENTS_PG = sa.text(
    """
    WITH seq AS (
        UPDATE __agents_states SET event_seq = event_seq + :n
        WHERE session_id = :sid
        RETURNING event_seq
    )
    INSERT INTO __agents_events (session_id, sequence, run_id, type, data, created_at)
    SELECT :sid, seq.event_seq - :n + e.ord, :run, e.v->>'type', e.v->'data', :now
    FROM seq, jsonb_array_elements(CAST(:events AS jsonb)) WITH ORDINALITY AS e(v, ord)
    RETURNING sequence
    """
)
"""Appending events on Postgres: the session's sequence taken and the rows inserted at once."""


@dataclass
class Pointing:
    """A checkpoint that the next compare-and-swap of its session row points at."""

    session_id: str
    checkpoint_id: str
    done: bool = False


class Prior:
    """Session rows read earlier, unlocked, that one ``update`` may start from instead of
    reading (and locking) them again: its compare-and-swap then checks that they are still
    at the versions read.

    Taken once, and handed over (``update`` may change them in place): a retried transaction
    (a lost swap) reads the rows as usual.
    """

    __slots__ = ("_states",)

    def __init__(self, *states: SessionState) -> None:
        self._states = {s.session_id: s for s in states}

    def take(self, ids: Sequence[str]) -> dict[str, SessionState] | None:
        """The rows ``ids`` if all were read (once; ``None`` after, or if one is missing)."""
        states, self._states = self._states, {}
        if any(i not in states for i in ids):
            return None
        return {i: states[i] for i in ids}


class NoChange(Exception):  # a control-flow signal, not an error
    """Raised by an ``update`` mutation to return ``value`` without writing anything."""

    def __init__(self, value: Any) -> None:
        super().__init__("no change")
        self.value = value


class Fenced(Exception):  # a control-flow signal, not an error
    """A transition's guard failed: the row's run or status is not what the writer expected.

    Raised inside a transaction, it rolls the whole transaction back, so a stopped or
    superseded run's step writes nothing.
    """

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(f"{session_id}: {reason}")
        self.session_id = session_id
        self.reason = reason


class RetryTransaction(Exception):  # a control-flow signal, not an error
    """Raised inside ``transact`` to roll back and run the transaction again after ``delay``.

    For a reader that knows a commit it depends on is on its way (a turn woken with an answer
    that its transaction cannot see yet).
    """

    def __init__(self, reason: str, delay: float = 0.02) -> None:
        super().__init__(reason)
        self.delay = delay


def guard(state: SessionState, run_id: str | None, statuses: Iterable[str]) -> None:
    """The fence of a transition: the row must still be on ``run_id`` in one of ``statuses``.

    Raises:
        Fenced: the run was superseded (another run id) or stopped/ended (another status).
    """
    if state.run_id != run_id:
        raise Fenced(state.session_id, "superseded")
    if state.status not in statuses:
        raise Fenced(state.session_id, "stopped" if state.status != "idle" else "idle")


class _Patience:
    # A plain class, not a generator context manager, and one context variable, not two:
    # every parked turn holds one open.
    __slots__ = ("_seconds", "_token")

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds

    def __enter__(self) -> None:
        self._token = _patience.set(_FOREVER if self._seconds is None else (self._seconds,))

    def __exit__(self, *_exc: object) -> None:
        _patience.reset(self._token)


_FOREVER: tuple[float | None] = (None,)


def patience(seconds: float | None) -> _Patience:
    """Within this block, store calls wait out database faults for ``seconds`` (``None``: for
    ever) before raising ``StoreUnavailableError``. Durable code waits for ever; requests use
    ``REQUEST_PATIENCE_SECONDS`` (the default outside any block)."""
    return _Patience(seconds)


def _current_patience() -> float | None:
    boxed = _patience.get()
    return REQUEST_PATIENCE_SECONDS if boxed is None else boxed[0]


def _backoff(attempt: int) -> float:
    return min(2.0, 0.05 * float(2 ** min(attempt, 6))) * jitter.uniform(0.5, 1.0)


def _now() -> datetime:
    return datetime.now(UTC)


def _state_from_row(found: sa.Row[Any]) -> SessionState:
    return session_row.decode(found._mapping)


_state_values = session_row.encode


async def _retrying(
    attempt: Callable[[], Awaitable[T]],
    *,
    attempts: int = PENDING_CLEAR_ATTEMPTS,
    retry_event: str | None = None,
    failed_event: str | None = None,
    log_fields: dict[str, Any] | None = None,
) -> T:
    """Run ``attempt`` until it succeeds: again on a lost race (up to ``attempts``), on a
    ``RetryTransaction``, and on a transient database fault while the patience lasts."""
    fields = log_fields or {}
    loop = asyncio.get_running_loop()
    wait = _current_patience()
    give_up = None if wait is None else loop.time() + wait
    races = faults = 0
    while True:
        try:
            return await attempt()
        except StaleStateError as exc:
            races += 1
            if races >= attempts:
                if failed_event:
                    log_event(failed_event, **fields, attempts=attempts, error=exc.message)
                raise StaleStateError(
                    f"Gave up after {attempts} compare-and-swap attempts",
                    **{**exc.details, **fields, "attempts": attempts},
                ) from exc
            if retry_event:
                log_event(retry_event, **fields, attempt=races)
            await asyncio.sleep(jitter.uniform(0.001, 0.005) * races)
        except RetryTransaction as again:
            await asyncio.sleep(again.delay)
        except Exception as exc:
            if not is_transient(exc):
                raise
            faults += 1
            if give_up is not None and loop.time() >= give_up:
                raise StoreUnavailableError() from exc
            if faults == 1:
                log_event("store.retrying", **fields, error=type(exc).__name__)
            await asyncio.sleep(_backoff(faults))


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def _read_retried(fn: F) -> F:
    """Make a read method wait out transient faults (unless it joins a transaction, whose
    ``transact`` retries as a whole)."""

    @functools.wraps(fn)
    async def run(self: SessionStore, *args: Any, **kwargs: Any) -> Any:
        joined = kwargs.get("conn") is not None or any(isinstance(a, AsyncConnection) for a in args)
        if joined or _bound.get() is not None:
            # On a caller's connection: a fault is the caller's to retry (a retry here would
            # reuse the broken connection).
            return await fn(self, *args, **kwargs)
        return await _retrying(lambda: fn(self, *args, **kwargs))

    return run  # type: ignore[return-value]


async def _untouched(conn: AsyncConnection) -> bool:
    """Whether ``conn``'s transaction has neither sent nor queued anything yet."""
    batch = current_batch(conn)
    return (batch is None or not batch.dirty(ALL)) and await pg.sent_nothing(conn)


async def _queued(
    conn: AsyncConnection, body: Callable[[AsyncConnection], Awaitable[T]]
) -> tuple[T, WriteBatch]:
    """Run ``body`` in ``conn``'s transaction, bound to the task, with its writes queued; then
    send them, in one statement (the whole transaction, if the body sent nothing else)."""
    token = _bound.set(conn)
    batch, queueing = begin(conn)
    try:
        value = await body(conn)
        await batch.flush(last=True)
    finally:
        end(queueing)
        _bound.reset(token)
    return value, batch


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
        self._lean: pg.LeanPool | None = None
        self._lean_tx: pg.LeanPool | None = None
        if self.dialect == "postgresql":
            size = engine.pool.size() if isinstance(engine.pool, sa.pool.QueuePool) else 5
            url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
            self._lean = pg.LeanPool(url, size)
            # Commits apart from reads: a stream's read cancelled by its leaving client closes
            # its connection, and a commit must not be the one that opens the next.
            self._lean_tx = pg.LeanPool(url, size)
        self.on_events: Callable[[set[str]], None] | None = None
        """Called with the sessions whose events a ``transact`` wrote, once it committed
        (Postgres): the runtime wakes its own streams of them at once (``EventSignals``)."""

    @classmethod
    def from_url(
        cls, database_url: str, *, max_state_bytes: int | None = None, pool_size: int = 10
    ) -> SessionStore:
        """A store on a user-facing database URL (``postgresql://``, ``sqlite:///``)."""
        urls = parse_database_url(database_url)
        if urls.is_sqlite:
            engine = create_async_engine(urls.async_)
            sqlite.configure(engine)
        else:
            engine = create_async_engine(
                urls.async_,
                pool_size=pool_size,
                max_overflow=pool_size,
                # No pre-ping round trip on every checkout (it doubled a read's latency). A
                # dropped connection fails its first statement; SQLAlchemy then invalidates the
                # whole pool (every connection older than the fault) and ``transact`` retries
                # on a fresh connection, so a process idle through an outage recovers at once.
                pool_recycle=1800,
            )
        return cls(engine, max_state_bytes=max_state_bytes)

    async def close(self) -> None:
        """Dispose of the engine's connections."""
        for lean in (self._lean, self._lean_tx):
            if lean is not None:
                await lean.close()
        await self.engine.dispose()

    async def _fetch(
        self,
        conn: AsyncConnection | None,
        sql: str,
        params: tuple[Any, ...] | dict[str, Any],
        reads: Iterable[str] = (STATES,),
        *,
        apart: bool = False,
    ) -> list[tuple[Any, ...]]:
        """A read of one statement on Postgres: in ``conn``'s transaction (or the bound one),
        the queued writes to ``reads`` sent first; else on its own (``pg.LeanPool``).

        ``apart``: on its own too while that transaction has sent and queued nothing, so the
        read does not open it (one that is then only its flush goes without BEGIN and COMMIT:
        ``pg.fetch_last``). Only for a caller whose writes swap from what it read
        (``Prior``): nothing of the read is held by the transaction.
        """
        joined = conn if conn is not None else _bound.get()
        if joined is not None and not (apart and await _untouched(joined)):
            await settle(joined, reads)
            return await pg.fetch(joined, sql, params)
        assert self._lean is not None
        return await self._lean.fetch(sql, params)

    async def write_statement(
        self, sql: str, params: tuple[Any, ...] | dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """Postgres: run one statement that writes, alone in its own transaction (autocommit,
        on the commit connections), and return its rows. For a write that a single statement
        decides whole (the deadline keeper's claim of a page); not retried: its caller tries
        again later.
        """
        assert self._lean_tx is not None, "write_statement is for Postgres"
        return await self._lean_tx.fetch(sql, params)

    @asynccontextmanager
    async def _read(
        self, conn: AsyncConnection | None, reads: Iterable[str] = (STATES,)
    ) -> AsyncIterator[AsyncConnection]:
        """Join ``conn`` (or the bound transaction), or read on an autocommit connection (no
        BEGIN/COMMIT round trips). Joining, the queued writes to ``reads`` are sent first."""
        conn = conn if conn is not None else _bound.get()
        if conn is not None:
            await settle(conn, reads)
            yield conn
            return
        async with self.engine.connect() as new_conn:
            await new_conn.execution_options(isolation_level="AUTOCOMMIT")
            yield new_conn

    @asynccontextmanager
    async def transaction(
        self, conn: AsyncConnection | None = None
    ) -> AsyncIterator[AsyncConnection]:
        """Join ``conn``'s transaction (or the bound one), or open (and commit) a new one.

        A new transaction here is NOT retried; use ``transact`` for anything that must survive
        a lost race or a database fault.
        """
        conn = conn if conn is not None else _bound.get()
        if conn is not None:
            await settle(conn)  # what runs here sees every queued write
            yield conn
            return
        async with self.engine.begin() as new_conn:
            if self.dialect != "postgresql":
                await sqlite.hold_writes(new_conn)
            yield new_conn

    @staticmethod
    @contextmanager
    def pointing(session_id: str, checkpoint_id: str) -> Iterator[Pointing]:
        """Within this block, a ``save`` of ``session_id`` also sets its checkpoint pointer to
        ``checkpoint_id`` (the row is locked by the transition, so this is the newest one);
        ``done`` tells ``write_checkpoint`` that the pointer needs no UPDATE of its own."""
        note = Pointing(session_id, checkpoint_id)
        token = _pointing.set(note)
        try:
            yield note
        finally:
            _pointing.reset(token)

    @staticmethod
    def bound() -> AsyncConnection | None:
        """The transaction bound to the running task by ``transact``, if any."""
        return _bound.get()

    async def transact(
        self,
        body: Callable[[AsyncConnection], Awaitable[T]],
        *,
        attempts: int = PENDING_CLEAR_ATTEMPTS,
        retry_event: str | None = None,
        failed_event: str | None = None,
        log_fields: dict[str, Any] | None = None,
        lean: bool = False,
    ) -> T:
        """Run ``body`` in one transaction, bound to the task, and commit it.

        The whole transaction is retried: up to ``attempts`` times on a lost compare-and-swap
        race (jittered backoff), and on a transient database fault with backoff until the
        database is back or the caller's ``patience`` is spent. ``body`` must therefore be
        safe to run several times: it may only write through the connection it is given.
        Inside an enclosing ``transact`` it simply joins (the outer one retries).

        ``lean``: on Postgres, the transaction runs on a driver connection of its own, not on
        one of SQLAlchemy's (``pg.LeanTransaction``: a third of a one-statement commit's CPU).
        Only for a body whose every statement goes through the store's queue and ``pg``'s
        statements (commits of turns, entries and answers); SQLAlchemy fails on it.

        Raises:
            StaleStateError: every attempt lost its race (logged as ``failed_event``).
            StoreUnavailableError: the database stayed unreachable past the patience.
            Fenced: a guard failed; nothing was written.
        """
        outer = _bound.get()
        if outer is not None:
            return await body(outer)

        async def once() -> T:
            if lean and self._lean_tx is not None:
                return await self._lean_once(body)
            async with self.engine.begin() as conn:
                if self.dialect != "postgresql":
                    await sqlite.hold_writes(conn)
                    token = _bound.set(conn)
                    try:
                        return await body(conn)
                    finally:
                        _bound.reset(token)
                value, batch = await _queued(conn, body)
            self._committed(batch)
            return value

        return await _retrying(
            once,
            attempts=attempts,
            retry_event=retry_event,
            failed_event=failed_event,
            log_fields=log_fields,
        )

    async def _lean_once(self, body: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """One attempt of a lean ``transact`` (``pg.LeanTransaction``)."""
        assert self._lean_tx is not None
        async with self._lean_tx.lease() as driver:
            tx = pg.LeanTransaction(driver)
            try:
                # The store's methods take an AsyncConnection; on this one, only ``pg`` runs.
                value, batch = await _queued(cast(AsyncConnection, tx), body)
                await tx.commit()
            except BaseException:
                await tx.rollback()
                raise
        self._committed(batch)
        return value

    def _committed(self, batch: WriteBatch) -> None:
        """After a commit: this process's streams of its sessions need not wait for NOTIFY."""
        if batch.evented and self.on_events is not None:
            self.on_events(batch.evented)

    # -- sessions ---------------------------------------------------------------------------

    async def create_session(
        self, state: SessionState, conn: AsyncConnection | None = None
    ) -> SessionState:
        """Insert a new session row (version 0)."""
        now = _now()
        batch = current_batch(conn)
        if batch is not None:
            await batch.create(
                state.session_id, {"created_at": now.isoformat(), **_state_values(state)}
            )
            return state.model_copy(update={"version": 0})
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

    @_read_retried
    async def load(
        self, session_id: str, conn: AsyncConnection | None = None
    ) -> SessionState | None:
        """The session, or ``None``."""
        if self.dialect == "postgresql":
            found = await self._fetch(conn, pg.STATE_BY_ID, (session_id,))
            return pg.state_from_tuple(found[0]) if found else None
        async with self._read(conn) as c:
            row = (await c.execute(_STATE_BY_ID, {"sid": session_id})).first()
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

    @_read_retried
    async def load_many(
        self, session_ids: Iterable[str], conn: AsyncConnection | None = None
    ) -> dict[str, SessionState]:
        """The sessions that exist among ``session_ids``."""
        ids = list(dict.fromkeys(session_ids))
        if self.dialect == "postgresql":
            found = await self._fetch(conn, pg.STATES_BY_IDS, (ids,))
            return {s.session_id: s for s in map(pg.state_from_tuple, found)}
        async with self._read(conn) as c:
            rows = (await c.execute(states.select().where(states.c.session_id.in_(ids)))).all()
        return {s.session_id: s for s in map(_state_from_row, rows)}

    async def save(self, state: SessionState, conn: AsyncConnection | None = None) -> SessionState:
        """Write ``state`` if the row is still at ``state.version``; returns it at version + 1.

        Raises:
            StaleStateError: another writer changed the row first.
        """
        self._check_size(state)
        values = _state_values(state)
        note = _pointing.get()
        if note is not None and note.session_id == state.session_id:
            values["latest_checkpoint_id"] = note.checkpoint_id
            note.done = True
        batch = current_batch(conn)
        if batch is not None:
            # Checked when the queue is sent: a lost race fails the transaction then.
            values["updated_at"] = _now().isoformat()
            await batch.save(state.session_id, state.version, values)
            return state.model_copy(update={"version": state.version + 1})
        values.update(b_session_id=state.session_id, b_version=state.version, b_updated_at=_now())
        async with self.transaction(conn) as c:
            result = await c.execute(_SAVE_STATE, values)
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
        prior: Prior | None = None,
    ) -> tuple[dict[str, SessionState], T]:
        """Read-modify-write one or more session rows atomically, compare-and-swap on versions.

        ``prior``: the rows as read earlier (see ``Prior``), used instead of reading them.

        ``mutate`` gets the current states by id (it may change them in place) and returns a
        value; it raises ``NoChange(value)`` to return without writing, or ``Fenced`` to roll
        the whole transaction back. ``mutate`` must be PURE: it may run several times (each
        retry reads the rows again), so it reports through its return value, never through
        outside state.

        Inside a transaction (``conn`` given, or one bound by ``transact``) this is one
        attempt, and a lost race raises ``StaleStateError`` for the enclosing ``transact`` to
        retry as a whole. On its own it runs in ``transact`` with ``attempts``.

        Raises:
            SessionNotFoundError: a session does not exist.
            StaleStateError: the retries were exhausted (logged as ``failed_event``).
        """
        ids = list(dict.fromkeys(session_ids))
        joined = conn if conn is not None else _bound.get()
        if joined is not None:
            return await self._update_once(ids, mutate, joined, prior)
        return await self.transact(
            lambda c: self._update_once(ids, mutate, c, prior),
            attempts=attempts,
            retry_event=retry_event,
            failed_event=failed_event,
            log_fields={"sessionIds": ids},
        )

    async def _update_once(
        self,
        ids: list[str],
        mutate: Callable[[dict[str, SessionState]], T],
        conn: AsyncConnection,
        prior: Prior | None = None,
    ) -> tuple[dict[str, SessionState], T]:
        taken = prior.take(ids) if prior is not None else None
        current = taken if taken is not None else await self._load_for_update(ids, conn)
        missing = [i for i in ids if i not in current]
        if missing:
            raise SessionNotFoundError(f"No session {missing[0]!r}", sessionId=missing[0])
        before = {i: s.version for i, s in current.items()}
        try:
            value = mutate(current)
        except NoChange as unchanged:
            if taken is not None:
                # No swap would check what the earlier read decided: decide on the row as it
                # is now (``mutate`` is pure: it may run again).
                return await self._update_once(ids, mutate, conn)
            return current, unchanged.value
        saved: dict[str, SessionState] = {}
        for sid in ids:
            state = current[sid]
            state.version = before[sid]
            saved[sid] = await self.save(state, conn)
        return saved, value

    async def _load_for_update(
        self, ids: list[str], conn: AsyncConnection
    ) -> dict[str, SessionState]:
        """The rows, locked for this transaction on Postgres (in id order: no deadlock), so
        concurrent writers queue instead of losing their compare-and-swap."""
        if self.dialect != "postgresql":
            rows = (await conn.execute(_STATES_BY_IDS, {"ids": ids})).all()
            return {s.session_id: s for s in map(_state_from_row, rows)}
        await settle(conn, (STATES,))
        found = await pg.fetch(conn, pg.LOCK_STATES, (ids,))
        batch = current_batch(conn)
        if batch is not None:
            for row in found:  # locked: their event sequences cannot move under this transaction
                batch.hold(row[0], row[pg.EVENT_SEQ])
        return {s.session_id: s for s in map(pg.state_from_tuple, found)}

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

    @_read_retried
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

    @_read_retried
    async def settled_before(
        self,
        cutoff: datetime,
        *,
        active: bool,
        workflow_ids: Sequence[str] | None = None,
        limit: int = 500,
        conn: AsyncConnection | None = None,
    ) -> list[SessionState]:
        """Sessions last written before ``cutoff``: the active ones (``active``) that are not
        hibernated (those have no workflow to judge), or the ended ones whose workflow is
        among ``workflow_ids`` (what the reconciler inspects)."""
        active_statuses = ["running", "suspended_client_tool"]
        query = states.select().where(states.c.updated_at < cutoff)
        if active:
            # Revision 0011's predicate, verbatim: the page is read off its partial index.
            query = query.where(sa.text(LIVE_ROW[self.dialect]))
        else:
            query = query.where(states.c.status.not_in(active_statuses))
        if workflow_ids is not None:
            query = query.where(states.c.workflow_id.in_(list(workflow_ids)))
        query = query.order_by(states.c.updated_at).limit(limit)
        async with self._read(conn) as c:
            return [_state_from_row(r) for r in (await c.execute(query)).all()]

    @_read_retried
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

    @_read_retried
    async def tree(
        self, session_id: str, conn: AsyncConnection | None = None
    ) -> list[SessionState]:
        """The session, then every other session of its root's tree but the root, parents
        before children (in one statement on Postgres).

        Raises:
            SessionNotFoundError: no such session.
        """
        if self.dialect == "postgresql":
            found = await self._fetch(conn, pg.TREE, {"sid": session_id})
            if not found:
                raise SessionNotFoundError(f"No session {session_id!r}", sessionId=session_id)
            return [pg.state_from_tuple(row) for row in found]
        top = await self.get(session_id, conn)
        below = await self.descendants(top.root_session_id, conn)
        return [top, *(s for s in below if s.session_id != session_id)]

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
        batch = current_batch(conn)
        if batch is not None:
            at = now.isoformat()
            batch.messages(
                session_id,
                [
                    {
                        "session_id": session_id,
                        "role": m.role,
                        "tool_call_id": m.tool_call_id,
                        "content": m.to_row(),
                        "run_id": run_id,
                        "created_at": at,
                    }
                    for m in new
                ],
            )
            return
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

    @_read_retried
    async def load_messages(
        self, session_id: str, conn: AsyncConnection | None = None
    ) -> list[Message]:
        """The session's conversation, oldest first (rows a rewind took out are skipped)."""
        if self.dialect == "postgresql":
            found = await self._fetch(conn, pg.LIVE_MESSAGES, (session_id,), (MESSAGES,))
            return [Message.from_row(role, content) for role, content in found]
        async with self._read(conn, (MESSAGES,)) as c:
            rows = (
                await c.execute(
                    sa.select(messages.c.role, messages.c.content)
                    .where(messages.c.session_id == session_id, LIVE_MESSAGE)
                    .order_by(messages.c.message_id)
                )
            ).all()
        return [Message.from_row(r.role, r.content) for r in rows]

    @_read_retried
    async def step_inputs(
        self, session_id: str, slot: str, conn: AsyncConnection | None = None
    ) -> tuple[SessionState, dict[str, Any] | None, list[Message]]:
        """What a model step reads before it calls the model, on one connection: the session,
        the recorded result of ``slot`` if its commit landed (then no history is read), and
        the conversation.

        Raises:
            SessionNotFoundError: no such session.
        """
        if self.dialect == "postgresql":
            found = await self._fetch(
                conn, pg.STEP_INPUTS, (slot, session_id), (STATES, CHECKPOINTS, MESSAGES)
            )
            if not found:
                raise SessionNotFoundError(f"No session {session_id!r}", sessionId=session_id)
            *selected, done, rows = found[0]
            history = [Message.from_row(r, c) for r, c in rows or ()]
            return pg.state_from_tuple(selected), done, history
        recorded = (
            sa.select(checkpoints.c.state)
            .where(checkpoints.c.checkpoint_id == slot)
            .scalar_subquery()
            .label("recorded_state")
        )
        async with self._read(conn, (STATES, CHECKPOINTS, MESSAGES)) as c:
            row = (
                await c.execute(
                    sa.select(states, recorded).where(states.c.session_id == session_id)
                )
            ).first()
            if row is None:
                raise SessionNotFoundError(f"No session {session_id!r}", sessionId=session_id)
            done = row._mapping["recorded_state"]
            history = [] if done is not None else await self.load_messages(session_id, c)
        return _state_from_row(row), done, history

    @_read_retried
    async def resume_inputs(
        self,
        session_id: str,
        session_ids: Sequence[str],
        conn: AsyncConnection | None = None,
        *,
        apart: bool = False,
    ) -> tuple[dict[str, SessionState], list[Message]]:
        """What a turn woken from its park reads, on one connection: the rows of
        ``session_ids`` (its own and its root's) and its own live conversation.

        ``apart``: on Postgres, read on a connection of its own while ``conn``'s transaction
        has sent nothing yet (``_fetch``): for a caller that swaps from the rows it read.

        Raises:
            SessionNotFoundError: ``session_id`` does not exist.
        """
        ids = list(dict.fromkeys([session_id, *session_ids]))
        history: list[Message] = []
        if self.dialect == "postgresql":
            found = await self._fetch(
                conn, pg.RESUME_INPUTS, (session_id, ids), (STATES, MESSAGES), apart=apart
            )
            rows: list[tuple[Any, ...]] = []
            for *selected, history_rows in found:
                rows.append(tuple(selected))
                if selected[0] == session_id:
                    history = [Message.from_row(r, m) for r, m in history_rows or ()]
            states = {s.session_id: s for s in map(pg.state_from_tuple, rows)}
        else:
            async with self._read(conn, (STATES, MESSAGES)) as c:
                states = await self.load_many(ids, c)
                history = await self.load_messages(session_id, c)
        if session_id not in states:
            raise SessionNotFoundError(f"No session {session_id!r}", sessionId=session_id)
        return states, history

    # -- events -----------------------------------------------------------------------------

    async def append_events(
        self,
        session_id: str,
        run_id: str | None,
        new: Sequence[dict[str, Any]],
        conn: AsyncConnection | None = None,
    ) -> int:
        """Append events to the session's stream; returns the last sequence number (0 when
        the transaction's flush numbers them: see ``store/batch.py``).

        The sequence comes from the session row, so concurrent writers are serialized by
        its row lock and a reader never sees a gap fill in later.
        """
        if not new:
            return 0
        now = _now()
        batch = current_batch(conn)
        if batch is not None:
            batch.evented.add(session_id)
        if batch is not None and batch.can_queue_events(session_id):
            at = now.isoformat()
            last = batch.events(
                session_id,
                [
                    {
                        "session_id": session_id,
                        "run_id": run_id,
                        "type": e["type"],
                        "data": e.get("data", {}),
                        "created_at": at,
                    }
                    for e in new
                ],
            )
            return last or 0
        async with self.transaction(conn) as c:
            if self.dialect == "postgresql":
                # One round trip: the sequence is taken and the rows inserted in one statement.
                rows = await c.execute(
                    _APPEND_EVENTS_PG,
                    {
                        "sid": session_id,
                        "run": run_id,
                        "n": len(new),
                        "now": now,
                        "events": json.dumps(
                            [{"type": e["type"], "data": e.get("data", {})} for e in new]
                        ),
                    },
                )
                sequences = [r[0] for r in rows]
                if not sequences:
                    raise sa.exc.NoResultFound(f"No session {session_id!r} to append events to")
                last = int(max(sequences))
                if batch is not None:
                    batch.hold(session_id, last)  # the row is locked by that update now
                return last
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

    @_read_retried
    async def read_events(
        self,
        session_id: str,
        after: int = 0,
        limit: int = 1000,
        conn: AsyncConnection | None = None,
    ) -> list[SessionEvent]:
        """Events with ``sequence > after``, in order."""
        if self.dialect == "postgresql":
            found = await self._fetch(conn, pg.EVENTS_AFTER, (session_id, after, limit), (EVENTS,))
            return [
                SessionEvent(sequence=n, type=t, run_id=r, session_id=session_id, data=d)
                for n, t, r, d in found
            ]
        async with self._read(conn, (EVENTS,)) as c:
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
        batch = current_batch(conn)
        if batch is not None:
            batch.usage(values)
            return
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
        created_at: datetime | None = None,
        pointed: bool = False,
        conn: AsyncConnection | None = None,
    ) -> str:
        """Write a checkpoint and point the session at it, unless it points at a newer one.

        ``message_count`` defaults to the session's messages as the transaction sees them. A
        given ``checkpoint_id`` that exists already fails with ``IntegrityError`` (the
        runtime's exactly-once marker for a step's writes).
        """
        checkpoint_id = checkpoint_id or f"cp_{uuid.uuid4().hex}"
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
                    "created_at": (created_at or _now()).isoformat(),
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
        created_at = created_at or _now()
        async with self.transaction(conn) as c:
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
            if pointed:
                return checkpoint_id  # the transition's own compare-and-swap moved it
            # The pointer only moves forward: a writer holding an older checkpoint (a slow
            # re-execution, a stale replica of the step) never moves it back.
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
        return checkpoint_id

    @_read_retried
    async def get_checkpoint(
        self, checkpoint_id: str, conn: AsyncConnection | None = None
    ) -> dict[str, Any] | None:
        """One checkpoint by id, or ``None``."""
        if self.dialect == "postgresql":
            found = await self._fetch(conn, pg.CHECKPOINT_BY_ID, (checkpoint_id,), (CHECKPOINTS,))
            return dict(zip(pg.CHECKPOINT_COLUMNS, found[0], strict=True)) if found else None
        async with self._read(conn, (CHECKPOINTS,)) as c:
            row = (await c.execute(_CHECKPOINT_BY_ID, {"checkpoint_id": checkpoint_id})).first()
        return dict(row._mapping) if row is not None else None

    @_read_retried
    async def latest_checkpoint(
        self, session_id: str, conn: AsyncConnection | None = None
    ) -> dict[str, Any] | None:
        """The checkpoint the session points at (never "highest step count")."""
        async with self._read(conn, (STATES, CHECKPOINTS)) as c:
            row = (
                await c.execute(
                    sa.select(checkpoints)
                    .join(states, states.c.latest_checkpoint_id == checkpoints.c.checkpoint_id)
                    .where(states.c.session_id == session_id)
                )
            ).first()
        return dict(row._mapping) if row is not None else None
