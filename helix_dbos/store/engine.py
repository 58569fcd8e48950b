"""The store's connections: its SQLAlchemy engine, Postgres's lean pools, and the transaction
bound to the running task.

A store method given no ``conn`` joins the transaction bound to the task (``transact`` binds
it, and so does a step's commit, ``runtime/_commits/once.py``), so a write can never silently land
outside the step's transaction. Bound to none, a read runs on an autocommit connection and a
write in a transaction of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ..config import parse_database_url
from . import pg, sqlite
from .batch import STATES, settle

if TYPE_CHECKING:
    from .dialect import Backend

__all__ = ["StoreEngine", "bind", "bound", "joined", "open_engine", "unbind"]

_bound: ContextVar[AsyncConnection | None] = ContextVar("helix_store_tx", default=None)


def bound() -> AsyncConnection | None:
    """The transaction bound to the running task, if any."""
    return _bound.get()


def joined() -> AsyncConnection:
    """The unit of work bound to the running task (for the store's own statements in it)."""
    conn = _bound.get()
    assert conn is not None, "only inside a unit of work (SessionStore.transact)"
    return conn


def bind(conn: AsyncConnection) -> Token[AsyncConnection | None]:
    """Bind ``conn``'s transaction to the running task until ``unbind`` with the token."""
    # A token, not a context manager: a transaction opens on every step of every turn.
    return _bound.set(conn)


def unbind(token: Token[AsyncConnection | None]) -> None:
    """End what ``bind`` began."""
    _bound.reset(token)


@contextmanager
def _bound_to(conn: AsyncConnection) -> Iterator[None]:
    """``conn`` bound to the task for the block."""
    token = bind(conn)
    try:
        yield
    finally:
        unbind(token)


def open_engine(database_url: str, pool_size: int) -> AsyncEngine:
    """An async engine on a user-facing database URL (``postgresql://``, ``sqlite:///``)."""
    urls = parse_database_url(database_url)
    if urls.is_sqlite:
        engine = create_async_engine(urls.async_)
        sqlite.configure(engine)
        return engine
    return create_async_engine(
        urls.async_,
        pool_size=pool_size,
        max_overflow=pool_size,
        # No pre-ping round trip on every checkout (it doubled a read's latency). A dropped
        # connection fails its first statement; SQLAlchemy then invalidates the whole pool
        # (every connection older than the fault) and ``transact`` retries on a fresh
        # connection, so a process idle through an outage recovers at once.
        pool_recycle=1800,
    )


class StoreEngine:
    """The engine and, on Postgres, two ``pg.LeanPool``: one for reads, one for commits.

    Args:
        engine: an async engine on the database that holds the ``__agents_*`` tables.
        backend: its dialect's (``dialect.backend_for``).
    """

    __slots__ = ("backend", "engine", "lean", "lean_tx")

    def __init__(self, engine: AsyncEngine, backend: Backend) -> None:
        self.engine = engine
        self.backend = backend
        self.lean: pg.LeanPool | None = backend.lean_pool(engine)
        # Commits apart from reads: a stream's read cancelled by its leaving client closes
        # its connection, and a commit must not be the one that opens the next.
        self.lean_tx: pg.LeanPool | None = backend.lean_pool(engine)

    async def close(self) -> None:
        """Close the lean pools' connections and dispose of the engine's."""
        for lean in (self.lean, self.lean_tx):
            if lean is not None:
                await lean.close()
        await self.engine.dispose()

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        """A new transaction, committed when the block ends (rolled back if it raises)."""
        async with self.engine.begin() as conn:
            await self.backend.opened(conn)  # SQLite: what the body reads holds until it commits
            yield conn

    @asynccontextmanager
    async def read(
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
    async def reading(self) -> AsyncIterator[None]:
        """Within this block, the store's functions read in the unit of work bound to the task
        or, bound to none, on one autocommit connection bound to the task for the block."""
        if _bound.get() is not None:
            yield
            return
        async with self.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            with _bound_to(conn):
                yield

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """One transaction bound to the task for the block, committed when it ends (rolled
        back if it raises); not retried."""
        async with self.begin() as conn:
            with _bound_to(conn):
                yield

    @asynccontextmanager
    async def transaction(self, conn: AsyncConnection | None) -> AsyncIterator[AsyncConnection]:
        """Join ``conn``'s transaction (or the bound one), or open (and commit) a new one."""
        conn = conn if conn is not None else _bound.get()
        if conn is not None:
            await settle(conn)  # what runs here sees every queued write
            yield conn
            return
        async with self.begin() as new_conn:
            yield new_conn
