"""The hot statements of a round trip on Postgres, sent on the transaction's driver connection.

A session's reads (its row, the row lock, the conversation, its events, a checkpoint) and the
flush of a transaction's queued writes run on every step of every turn and every stream.
SQLAlchemy Core costs more Python than the statement itself there (compiling, cache keys,
events, result wrapping, a greenlet hop per call), so these go to psycopg directly, on the
connection (and in the transaction) SQLAlchemy checked out: fixed SQL texts, which psycopg
prepares after a few uses as it does SQLAlchemy's.

Errors look as if SQLAlchemy had run the statement: a driver error is raised as SQLAlchemy's
``DBAPIError`` subclass (``IntegrityError`` for a conflict), and a connection that broke under
the statement is handed to SQLAlchemy, which invalidates it (and the pool's older connections)
as for any statement of its own.

A read that joins no transaction does not go through SQLAlchemy's pool at all: ``LeanPool``
keeps driver connections in autocommit mode for them, and for the hot transactions whose every
statement is one of these (``LeanTransaction``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from . import row as session_row
from ._sql.postgres import (  # the hot reads' statements, by name
    CHECKPOINT_BY_ID,
    CHECKPOINT_COLUMNS,
    EVENTS_AFTER,
    LIVE_MESSAGES,
    LOCK_STATES,
    RESUME_INPUTS,
    RESUME_INPUTS_RECORDED,
    STATE_BY_ID,
    STATES_BY_IDS,
    STEP_INPUTS,
    TREE,
)

__all__ = [
    "CHECKPOINT_BY_ID",
    "CHECKPOINT_COLUMNS",
    "EVENTS_AFTER",
    "LIVE_MESSAGES",
    "LOCK_STATES",
    "STATE_BY_ID",
    "STATES_BY_IDS",
    "RESUME_INPUTS",
    "RESUME_INPUTS_RECORDED",
    "TREE",
    "STEP_INPUTS",
    "LeanPool",
    "LeanTransaction",
    "fetch",
    "fetch_last",
    "listen",
    "sent_nothing",
    "state_from_tuple",
]

#: Index of ``event_seq`` in a selected row.
EVENT_SEQ = session_row.EVENT_SEQ

_GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan"
"""The lean connections' statements are few, fixed and keyed by ids (a session, a checkpoint):
each is prepared on its first use on a connection (``prepare_threshold=0``) with one generic
plan that fits every call. Planning each call anew (the server's default for a statement
run fewer than five times on a connection, and while it compares plans) cost a third of
executing the batch's statement."""


#: A session from a row selected in ``row.SELECT_LIST``'s order.
state_from_tuple = session_row.decode_tuple


async def _driver(conn: AsyncConnection) -> psycopg.AsyncConnection[Any]:
    """The driver connection of ``conn`` (checked out: no greenlet switch to look it up)."""
    sync = conn.sync_connection
    if sync is not None and not sync.closed and not sync.invalidated:
        fairy = sync.connection  # held by the connection: no I/O here
        driver = fairy.driver_connection
    else:
        driver = (await conn.get_raw_connection()).driver_connection
    assert isinstance(driver, psycopg.AsyncConnection)
    return driver


async def sent_nothing(conn: AsyncConnection) -> bool:
    """Whether ``conn``'s transaction has sent no statement yet (the driver sends BEGIN with
    the first one): a read on another connection then sees what its first statement would."""
    if isinstance(conn, LeanTransaction):
        return not conn.began
    driver = await _driver(conn)
    return driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


async def fetch(
    conn: AsyncConnection, sql: str, params: tuple[Any, ...] | dict[str, Any]
) -> list[tuple[Any, ...]]:
    """Run ``sql`` on ``conn``'s driver connection, in its transaction; its rows.

    Raises:
        sqlalchemy.exc.DBAPIError: as SQLAlchemy raises it (``IntegrityError`` ...).
    """
    if isinstance(conn, LeanTransaction):
        return await conn.fetch(sql, params, last=False)
    driver = await _driver(conn)
    try:
        # Every statement here returns rows (a flush ends in a SELECT).
        return await (await driver.execute(sql, params)).fetchall()
    except psycopg.Error as exc:
        if driver.broken or driver.closed:
            # Let SQLAlchemy meet the broken connection: it invalidates it (and the pool's
            # older connections) and raises its own error, marked invalidated.
            await conn.exec_driver_sql("SELECT 1")
        raise sa.exc.DBAPIError.instance(
            sql, params, exc, psycopg.Error, dialect=conn.dialect
        ) from exc


async def fetch_last(
    conn: AsyncConnection, sql: str, params: tuple[Any, ...] | dict[str, Any]
) -> list[tuple[Any, ...]]:
    """``fetch`` for the last statement of ``conn``'s transaction.

    When nothing was sent in the transaction before it (the driver has not even sent BEGIN:
    it does so with the first statement), the statement is sent on its own, without BEGIN and
    COMMIT: two round trips fewer, and one statement is atomic by itself. The caller's COMMIT
    then has nothing to do, and the driver sends none.
    """
    if isinstance(conn, LeanTransaction):
        return await conn.fetch(sql, params, last=True)
    driver = await _driver(conn)
    if driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return await fetch(conn, sql, params)
    await driver.set_autocommit(True)
    try:
        return await fetch(conn, sql, params)
    finally:
        if not driver.closed:
            await driver.set_autocommit(False)


@contextlib.asynccontextmanager
async def listen(url: str, channel: str) -> AsyncIterator[AsyncIterator[str]]:
    """A driver connection of its own, in autocommit mode, listening on ``channel``: the
    payloads of its notifications as they arrive (NOTIFY has no SQLAlchemy form). Closed
    when the block ends; a lost connection ends the iteration with psycopg's error."""
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    async with conn:
        await conn.execute(f'LISTEN "{channel}"')
        yield (note.payload async for note in conn.notifies())


class LeanPool:
    """Driver connections in autocommit mode for reads that are one statement.

    A read through SQLAlchemy's pool pays for a checkout, an isolation-level switch and a
    reset on checkin: about two thirds of the CPU of a one-statement read (measured: 350 us
    against 105 us on the driver alone). These reads join no transaction, so they need none
    of it. A connection that broke is closed, and with it every idle one (a restarted server
    ended them all); one older than ``recycle_seconds`` is replaced.
    """

    def __init__(self, url: str, size: int, recycle_seconds: float = 1800.0) -> None:
        self._url = url
        # The URL's own server options (a search_path, say) are kept: ours are added to them.
        given = psycopg.conninfo.conninfo_to_dict(url).get("options") or ""
        self._options = f"{given} {_GENERIC_PLANS}".strip()
        self._size = size
        self._recycle = recycle_seconds
        self._idle: list[tuple[float, psycopg.AsyncConnection[Any]]] = []
        self._slots: asyncio.Semaphore | None = None
        self._refill: asyncio.Future[None] | None = None

    async def fetch(
        self, sql: str, params: tuple[Any, ...] | dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """Run ``sql`` on its own, on an idle connection (or a new one); its rows.

        Raises:
            sqlalchemy.exc.DBAPIError: as ``fetch`` raises it.
        """
        async with self.lease() as driver:
            try:
                return await (await driver.execute(sql, params)).fetchall()
            except psycopg.Error as exc:
                raise _wrapped(sql, params, exc, driver.broken or driver.closed) from exc

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """An idle connection (or a new one) for the block, given back after it: kept if it
        is sound and outside any transaction, closed otherwise."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._size)
        async with self._slots:
            born, driver = await self._take()
            cancelled = False
            try:
                yield driver
            except asyncio.CancelledError:
                # Its caller left (a stream's client went away): the driver closes a
                # connection cancelled mid-statement, which says nothing of the others.
                cancelled = True
                raise
            finally:
                self._give_back(born, driver, alone=cancelled)

    async def _take(self) -> tuple[float, psycopg.AsyncConnection[Any]]:
        now = time.monotonic()
        while self._idle:
            born, driver = self._idle.pop()
            if now - born < self._recycle and not driver.closed:
                return born, driver
            await driver.close()
        try:
            driver = await psycopg.AsyncConnection.connect(
                self._url, autocommit=True, options=self._options, prepare_threshold=0
            )
        except psycopg.Error as exc:
            raise _wrapped("connect", (), exc, True) from exc
        return now, driver

    def _give_back(
        self, born: float, driver: psycopg.AsyncConnection[Any], *, alone: bool = False
    ) -> None:
        """Keep ``driver`` if it is sound and outside any transaction; else close it, and,
        unless ``alone``, the idle ones with it (a broken connection: the server may have
        restarted, and so ended them all)."""
        if driver.broken and not alone:
            stale, self._idle = self._idle, []
            for _, conn in [*stale, (born, driver)]:
                if not conn.closed:
                    asyncio.ensure_future(conn.close())
            return
        if driver.closed or driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            if not driver.closed:
                asyncio.ensure_future(driver.close())
            if alone and self._refill is None:
                # Open its replacement now, not in the way of the next caller.
                self._refill = asyncio.ensure_future(self._replace())
            return
        self._idle.append((born, driver))

    async def _replace(self) -> None:
        """Open one idle connection (after a cancelled caller's was closed)."""
        try:
            if len(self._idle) < self._size:
                driver = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
                self._idle.append((time.monotonic(), driver))
        except psycopg.Error:
            pass  # the next caller connects, and reports what fails
        finally:
            self._refill = None

    async def close(self) -> None:
        """Close the idle connections."""
        if self._refill is not None:
            self._refill.cancel()
            with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                await self._refill
        idle, self._idle = self._idle, []
        for _, driver in idle:
            await driver.close()


class NeedsEngine(BaseException):  # a control-flow signal; no ``except Exception`` eats it
    """A statement of SQLAlchemy's was asked of a ``LeanTransaction``: the unit of work runs
    again, whole, on a SQLAlchemy connection (``pg_paths.PostgresPaths.attempt``)."""


class LeanTransaction:
    """A transaction on a ``LeanPool`` connection, for transactions whose every statement is
    a ``fetch`` (the store's queued writes, row locks, reads), never SQLAlchemy's.

    The connection is in autocommit mode: ``BEGIN`` is sent before the first statement that is
    not the transaction's last. A transaction of one statement (the common commit: a flush) is
    then sent alone, as ``fetch_last`` does on SQLAlchemy's connections. It stands in for the
    ``AsyncConnection`` that the store's functions take: ``fetch`` and ``fetch_last`` run on
    it, and anything of SQLAlchemy's raises ``NeedsEngine`` (the unit of work then runs on
    SQLAlchemy instead).
    """

    __slots__ = ("began", "driver")

    def __init__(self, driver: psycopg.AsyncConnection[Any]) -> None:
        self.driver = driver
        self.began = False

    def __getattr__(self, name: str) -> Any:
        # Only what is not a slot or a method gets here: SQLAlchemy's ``execute``,
        # ``run_sync``, ``scalar``... None of it runs on a driver connection.
        raise NeedsEngine(name)

    async def fetch(
        self, sql: str, params: tuple[Any, ...] | dict[str, Any], *, last: bool
    ) -> list[tuple[Any, ...]]:
        """Run ``sql`` in the transaction (``last``: nothing is sent after it); its rows."""
        try:
            if not self.began and not last:
                await self.driver.execute("BEGIN")
                self.began = True
            return await (await self.driver.execute(sql, params)).fetchall()
        except psycopg.Error as exc:
            raise _wrapped(sql, params, exc, self.driver.broken or self.driver.closed) from exc

    async def commit(self) -> None:
        """Commit what was sent after ``BEGIN`` (a lone statement has committed already)."""
        if self.began:
            try:
                await self.driver.execute("COMMIT")
            except psycopg.Error as exc:
                raise _wrapped("COMMIT", (), exc, self.driver.broken or self.driver.closed) from exc

    async def rollback(self) -> None:
        """Roll back after a failure; a connection that cannot is dropped by its pool."""
        driver = self.driver
        if driver.closed or driver.broken:
            return
        if driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                await driver.execute("ROLLBACK")


def _wrapped(
    sql: str, params: tuple[Any, ...] | dict[str, Any], exc: psycopg.Error, broken: bool
) -> sa.exc.StatementError:
    """A driver error as SQLAlchemy raises it, so that callers see one kind of error."""
    return sa.exc.DBAPIError.instance(
        sql, params, exc, psycopg.Error, connection_invalidated=broken
    )
