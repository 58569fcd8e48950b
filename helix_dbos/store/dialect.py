"""The store's one dispatch on the database: what Postgres and SQLite each do their own way.

Two objects per dialect, picked once when a store is made, and nowhere else:

* its ``Backend`` (``backend_for``; ``Postgres`` or ``SQLite`` below): the statements only
  that dialect speaks, by name (their text in ``_sql/postgres.py`` and ``_sql/sqlite.py``),
  and the few behaviours that differ (the fleet's clock, DBOS's table names, row locks, the
  driver pools, what a transaction does as it opens). A function handed a connection and no
  store (the outbox's and the decision record's inserts, migrate, the retention sweeper)
  finds the same object with ``backend_of``;
* its ``Paths`` (``paths_for``): the store's methods that differ. Postgres's in
  ``pg_paths.py`` (the queued writes, the hot reads on the driver connection), SQLite's in
  ``sqlite_paths.py`` (SQLAlchemy Core, the write lock taken as a transaction opens).

Every other statement is the same on both, and no other module of the store asks which
dialect it runs on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..core.events import SessionEvent
from ..core.messages import Message
from ..core.session import SessionState
from . import pg, sqlite
from ._sql import postgres as pg_sql
from ._sql import sqlite as sqlite_sql
from .batch import WriteBatch
from .engine import StoreEngine
from .pg_paths import PostgresPaths
from .sqlite_paths import SQLitePaths

__all__ = ["Backend", "Paths", "Postgres", "SQLite", "backend_for", "backend_of", "paths_for"]

T = TypeVar("T")


class Backend(Protocol):
    """A dialect's named statements and the behaviours that differ (``Postgres``, ``SQLite``)."""

    #: SQLAlchemy's name of the dialect (``postgresql``, ``sqlite``).
    name: str
    #: Whether writers lock rows (``FOR UPDATE``) rather than the whole database.
    row_locks: bool
    #: Revision 0011's predicate of a live row (``sessions.settled_before``).
    live_row: str
    #: Revision 0010's index: when a hibernated row's batch falls due, and which rows it holds.
    hibernated_due: str
    hibernated_row: str
    #: One statement that claims a page of due batches, or ``None``: each row by its own
    #: compare-and-swap (``hibernated.claim_due_batches``).
    claim_due_batches: str | None
    #: The pending client calls by tool, and where the lapsed approvals are counted from
    #: (``pending_figures``); the settings its transaction runs first.
    client_calls: str
    lapsed_approvals_from: str
    figures_plan: tuple[str, ...]
    #: The statement that folds the approval counts' slots into one row per tool, or ``None``:
    #: one slot per tool (SQLite's single writer).
    merge_approval_counts: str | None
    #: Appended to a SELECT that claims rows, skipping those another transaction holds.
    skip_locked: str
    #: The lock that serializes migrations, and its release; ``None`` without one.
    migration_lock: str | None
    migration_unlock: str | None
    #: The query of the database's collation; ``None``: it orders bytes.
    collation: str | None

    def insert(self, table: sa.Table) -> Any:
        """An INSERT on ``table`` that takes ``ON CONFLICT`` clauses."""

    def now(self) -> Any:
        """The fleet's clock, as a value or a SQL expression."""

    def ago(self, seconds: float) -> Any:
        """The fleet's clock ``seconds`` ago."""

    def dbos_table(self, schema: str, table: str) -> str:
        """One of DBOS's tables, as SQL."""

    def lean_pool(self, engine: AsyncEngine) -> pg.LeanPool | None:
        """A pool of driver connections beside ``engine``'s, or ``None``."""

    async def opened(self, conn: AsyncConnection) -> None:
        """What a store transaction does as it opens on ``conn``."""


class Postgres:
    """The store on Postgres: row locks (many writers at once), schemas (DBOS's tables are
    ``<schema>.<table>``), one clock for the whole fleet (``clock_timestamp()``), JSONB, and
    psycopg's driver pools beside SQLAlchemy's (``pg.LeanPool``). Its SQL: ``_sql/postgres.py``."""

    __slots__ = ()

    name = pg_sql.NAME
    row_locks = True
    live_row = pg_sql.LIVE_ROW
    hibernated_due = pg_sql.HIBERNATED_DUE
    hibernated_row = pg_sql.HIBERNATED_ROW
    claim_due_batches: str | None = pg_sql.CLAIM_DUE_BATCHES
    client_calls = pg_sql.CLIENT_CALLS
    lapsed_approvals_from = pg_sql.LAPSED_APPROVALS_FROM
    figures_plan: tuple[str, ...] = pg_sql.FIGURES_PLAN
    merge_approval_counts: str | None = pg_sql.MERGE_APPROVAL_COUNTS
    skip_locked = " FOR UPDATE SKIP LOCKED"
    migration_lock: str | None = pg_sql.MIGRATION_LOCK
    migration_unlock: str | None = pg_sql.MIGRATION_UNLOCK
    collation: str | None = pg_sql.COLLATION

    @staticmethod
    def insert(table: sa.Table) -> postgresql.Insert:
        return postgresql.insert(table)

    @staticmethod
    def now() -> Any:
        return sa.func.clock_timestamp()  # the database's: one clock for every host

    @staticmethod
    def ago(seconds: float) -> Any:
        return sa.func.clock_timestamp() - timedelta(seconds=seconds)

    @staticmethod
    def dbos_table(schema: str, table: str) -> str:
        return f"{schema}.{table}"

    @staticmethod
    def lean_pool(engine: AsyncEngine) -> pg.LeanPool | None:
        size = engine.pool.size() if isinstance(engine.pool, sa.pool.QueuePool) else 5
        url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        return pg.LeanPool(url, size)

    @staticmethod
    async def opened(conn: AsyncConnection) -> None:
        return None  # row locks hold what the transaction reads


class SQLite:
    """The store on SQLite: one writer at a time (no row locks, so nothing to skip or lock), no
    schemas, one machine (its clock is this process's), JSON as text (``json_extract``), no
    driver pools. Its SQL: ``_sql/sqlite.py``."""

    __slots__ = ()

    name = sqlite_sql.NAME
    row_locks = False
    live_row = sqlite_sql.LIVE_ROW
    hibernated_due = sqlite_sql.HIBERNATED_DUE
    hibernated_row = sqlite_sql.HIBERNATED_ROW
    claim_due_batches: str | None = None
    client_calls = sqlite_sql.CLIENT_CALLS
    lapsed_approvals_from = sqlite_sql.LAPSED_APPROVALS_FROM
    figures_plan: tuple[str, ...] = ()
    skip_locked = ""
    merge_approval_counts: str | None = None
    migration_lock: str | None = None
    migration_unlock: str | None = None
    collation: str | None = None

    @staticmethod
    def insert(table: sa.Table) -> sqlite_dialect.Insert:
        return sqlite_dialect.insert(table)

    @staticmethod
    def now() -> Any:
        return datetime.now(UTC)  # this machine's: the one machine

    @staticmethod
    def ago(seconds: float) -> Any:
        return datetime.now(UTC) - timedelta(seconds=seconds)

    @staticmethod
    def dbos_table(schema: str, table: str) -> str:
        return table  # no schemas

    @staticmethod
    def lean_pool(engine: AsyncEngine) -> pg.LeanPool | None:
        return None

    @staticmethod
    async def opened(conn: AsyncConnection) -> None:
        await sqlite.hold_writes(conn)  # what the transaction reads holds until it commits


_BACKENDS: dict[str, Backend] = {Postgres.name: Postgres(), SQLite.name: SQLite()}


def backend_for(name: str) -> Backend:
    """The backend of the dialect SQLAlchemy calls ``name``."""
    return _BACKENDS[name]


def backend_of(conn: AsyncConnection | sa.Connection) -> Backend:
    """The backend of ``conn``'s database."""
    return _BACKENDS[conn.dialect.name]


class Paths(Protocol):
    """A dialect's side of the store's methods (see ``SessionStore`` for what each does)."""

    #: The insert of usage rows that skips a row whose ``dedupe_key`` exists.
    usage_insert: sa.Executable

    async def attempt(
        self,
        body: Callable[[], Awaitable[T]],
        *,
        committed: Callable[[WriteBatch], None],
    ) -> T:
        """One attempt of ``transact``'s transaction, bound to the task, committed."""

    async def load(self, session_id: str, conn: AsyncConnection | None) -> SessionState | None:
        """The session, or ``None``."""

    async def load_many(
        self, ids: list[str], conn: AsyncConnection | None
    ) -> dict[str, SessionState]:
        """The sessions that exist among ``ids``."""

    async def lock(self, ids: list[str], conn: AsyncConnection) -> dict[str, SessionState]:
        """The rows, held by ``conn``'s transaction until it ends."""

    async def tree(self, session_id: str, conn: AsyncConnection | None) -> list[SessionState]:
        """The session, then the rest of its root's tree but the root."""

    async def load_messages(self, session_id: str, conn: AsyncConnection | None) -> list[Message]:
        """The live conversation, oldest first."""

    async def step_inputs(
        self, session_id: str, slot: str, conn: AsyncConnection | None
    ) -> tuple[SessionState, dict[str, Any] | None, list[Message]]:
        """A model step's inputs."""

    async def resume_inputs(
        self, session_id: str, ids: list[str], conn: AsyncConnection | None
    ) -> tuple[dict[str, SessionState], list[Message]]:
        """A woken turn's rows and its own conversation."""

    async def resume_recorded(
        self, session_id: str, ids: list[str], slot: str
    ) -> tuple[dict[str, Any] | None, dict[str, SessionState], list[Message]]:
        """``resume_inputs`` (on a connection of its own) with the recorded state of ``slot``
        (``None`` when it did not commit, or when ``session_id``'s row is missing)."""

    async def insert_events(
        self,
        c: AsyncConnection,
        session_id: str,
        run_id: str | None,
        new: Sequence[dict[str, Any]],
        now: datetime,
    ) -> int:
        """Append events on ``c`` now; the last sequence number."""

    async def read_events(
        self, session_id: str, after: int, limit: int, conn: AsyncConnection | None
    ) -> list[SessionEvent]:
        """Events with ``sequence > after``, in order."""

    async def get_checkpoint(
        self, checkpoint_id: str, conn: AsyncConnection | None
    ) -> dict[str, Any] | None:
        """One checkpoint by id, or ``None``."""


def paths_for(db: StoreEngine) -> Paths:
    """The paths of ``db``'s dialect."""
    return _PATHS[db.backend.name](db)


_PATHS: dict[str, Callable[[StoreEngine], Paths]] = {
    Postgres.name: PostgresPaths,
    SQLite.name: SQLitePaths,
}
