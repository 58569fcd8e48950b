"""``is_transient`` on real failures: each exception below is produced against a real
Postgres (a private cluster this module starts, stops and restarts) or a real SQLite file.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from helix_dbos.errors import StaleStateError, StoreUnavailableError
from helix_dbos.store.faults import is_transient

from .pgcluster import PrivateCluster

pytestmark = pytest.mark.postgres_only


def _raised(fn: object) -> BaseException:
    """Call ``fn`` and return what it raised (it must raise)."""
    assert callable(fn)
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("expected an exception")


def _terminate(admin_url: str, pid: int) -> None:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


# -- Postgres: the database is unreachable ------------------------------------------------


def test_connection_refused_is_transient(cluster: PrivateCluster, cluster_url: str) -> None:
    """A stopped server refuses connections: transient, raw and through SQLAlchemy."""
    cluster.stop()
    try:
        raw = _raised(lambda: psycopg.connect(cluster_url, connect_timeout=5))
        assert isinstance(raw, psycopg.OperationalError) and "refused" in str(raw)
        assert is_transient(raw)

        async def checkout() -> None:
            engine = create_async_engine(
                cluster_url.replace("postgresql://", "postgresql+psycopg://")
            )
            try:
                async with engine.connect():
                    pass
            finally:
                await engine.dispose()

        wrapped = _raised(lambda: asyncio.run(checkout()))
        assert isinstance(wrapped, sa.exc.OperationalError)
        assert is_transient(wrapped)
    finally:
        cluster.start()


def test_terminated_backend_is_transient(cluster: PrivateCluster, cluster_url: str) -> None:
    """pg_terminate_backend: AdminShutdown (57P01), then "the connection is closed"."""
    conn = psycopg.connect(cluster_url, autocommit=True)
    _terminate(cluster.admin_url, conn.info.backend_pid)
    first = _raised(lambda: conn.execute("SELECT 1"))
    assert isinstance(first, psycopg.errors.AdminShutdown) and first.sqlstate == "57P01"
    assert is_transient(first)
    closed = _raised(lambda: conn.execute("SELECT 1"))
    assert isinstance(closed, psycopg.OperationalError) and closed.sqlstate is None
    assert is_transient(closed)


def test_dead_pooled_connection_is_transient(cluster: PrivateCluster, cluster_url: str) -> None:
    """A pooled connection killed behind SQLAlchemy's back: connection_invalidated, transient."""

    async def scenario() -> BaseException:
        engine = create_async_engine(cluster_url.replace("postgresql://", "postgresql+psycopg://"))
        try:
            async with engine.connect() as conn:
                pid = (await conn.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one()
            _terminate(cluster.admin_url, pid)
            try:
                async with engine.connect() as conn:
                    await conn.execute(sa.text("SELECT 1"))
            except BaseException as exc:
                return exc
            raise AssertionError("the dead pooled connection answered")
        finally:
            await engine.dispose()

    exc = asyncio.run(scenario())
    assert isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated
    assert is_transient(exc)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_server_shutdown_under_an_open_connection_is_transient(
    cluster: PrivateCluster, cluster_url: str, mode: str
) -> None:
    """A server stopped (fast or immediate) under an open connection: its next use fails
    transiently."""
    conn = psycopg.connect(cluster_url, autocommit=True)
    try:
        cluster.stop(mode=mode)
        exc = _raised(lambda: conn.execute("SELECT 1"))
        assert isinstance(exc, psycopg.OperationalError)
        assert is_transient(exc), repr(exc)
    finally:
        conn.close()
        cluster.start()


# -- Postgres: a concurrent transaction won -------------------------------------------------


def test_serialization_failure_is_transient(cluster_url: str) -> None:
    """Two SERIALIZABLE transactions that read and write each other's rows: 40001."""
    with psycopg.connect(cluster_url, autocommit=True) as setup:
        setup.execute("CREATE TABLE t (k int PRIMARY KEY, v int)")
        setup.execute("INSERT INTO t VALUES (1, 0), (2, 0)")
    a = psycopg.connect(cluster_url)
    b = psycopg.connect(cluster_url)
    try:
        for conn in (a, b):
            conn.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        a.execute("SELECT sum(v) FROM t").fetchone()
        b.execute("SELECT sum(v) FROM t").fetchone()
        a.execute("UPDATE t SET v = v + 1 WHERE k = 1")
        b.execute("UPDATE t SET v = v + 1 WHERE k = 2")
        a.commit()
        exc = _raised(b.commit)
        assert isinstance(exc, psycopg.errors.SerializationFailure) and exc.sqlstate == "40001"
        assert is_transient(exc)
    finally:
        a.close()
        b.close()


def test_deadlock_is_transient(cluster_url: str) -> None:
    """Two transactions locking two rows in opposite orders: one is the victim, 40P01."""
    with psycopg.connect(cluster_url, autocommit=True) as setup:
        setup.execute("CREATE TABLE t (k int PRIMARY KEY)")
        setup.execute("INSERT INTO t VALUES (1), (2)")
    both_locked = threading.Barrier(2, timeout=30)
    failures: list[BaseException] = []

    def worker(first: int, second: int) -> None:
        with psycopg.connect(cluster_url) as conn:
            conn.execute("SET deadlock_timeout = '200ms'")
            conn.execute("SELECT * FROM t WHERE k = %s FOR UPDATE", (first,))
            both_locked.wait()
            try:
                conn.execute("SELECT * FROM t WHERE k = %s FOR UPDATE", (second,))
            except psycopg.Error as exc:
                failures.append(exc)

    threads = [threading.Thread(target=worker, args=pair) for pair in ((1, 2), (2, 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(failures) == 1, failures
    assert isinstance(failures[0], psycopg.errors.DeadlockDetected)
    assert is_transient(failures[0])


# -- Postgres: not transient ------------------------------------------------------------


def test_permanent_postgres_failures_are_not_transient(
    cluster: PrivateCluster, cluster_url: str
) -> None:
    """A missing database or role, a constraint, a syntax error, a cancelled statement."""
    missing_db = _raised(lambda: psycopg.connect(cluster.url("no_such_database")))
    missing_role = _raised(
        lambda: psycopg.connect(f"postgresql://nobody@127.0.0.1:{cluster.port}/postgres")
    )
    with psycopg.connect(cluster_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k int PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1)")
        unique = _raised(lambda: conn.execute("INSERT INTO t VALUES (1)"))
        syntax = _raised(lambda: conn.execute("SELEC 1"))
        conn.execute("SET statement_timeout = '50ms'")
        cancelled = _raised(lambda: conn.execute("SELECT pg_sleep(5)"))
    assert isinstance(unique, psycopg.errors.UniqueViolation)
    assert isinstance(cancelled, psycopg.errors.QueryCanceled)
    for exc in (missing_db, missing_role, unique, syntax, cancelled):
        assert not is_transient(exc), repr(exc)

    engine = sa.create_engine(cluster_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            wrapped = _raised(lambda: conn.execute(sa.text("SELECT * FROM t WHERE k = 'x'")))
    finally:
        engine.dispose()
    assert isinstance(wrapped, sa.exc.DBAPIError) and not wrapped.connection_invalidated
    assert not is_transient(wrapped)


# -- causes, groups and the pool ------------------------------------------------------------


def test_causes_and_contexts_are_followed(cluster: PrivateCluster, cluster_url: str) -> None:
    """An error raised from (or while handling) a transient one is transient; ``from None``
    cuts the chain."""
    conn = psycopg.connect(cluster_url, autocommit=True)
    _terminate(cluster.admin_url, conn.info.backend_pid)
    root = _raised(lambda: conn.execute("SELECT 1"))

    def raise_from() -> None:
        raise RuntimeError("the step failed") from root

    def raise_during() -> None:
        try:
            raise root
        except psycopg.Error:
            raise KeyError("while handling") from None

    def raise_in_handler() -> None:
        try:
            raise root
        except psycopg.Error:
            raise ValueError("while handling")  # noqa: B904 - the implicit context is the point

    assert is_transient(_raised(raise_from))
    assert is_transient(_raised(raise_in_handler))
    assert not is_transient(_raised(raise_during))
    assert not is_transient(ExceptionGroup("mixed", [root, RuntimeError("a bug")]))  # type: ignore[type-var]
    wrapped_twice = _raised(raise_from)
    assert is_transient(ExceptionGroup("all transient", [root, wrapped_twice]))  # type: ignore[type-var]


def test_pool_checkout_timeout_is_transient(cluster_url: str) -> None:
    """Every pooled connection busy past the pool timeout: SQLAlchemy's TimeoutError."""
    engine = sa.create_engine(
        cluster_url.replace("postgresql://", "postgresql+psycopg://"),
        pool_size=1,
        max_overflow=0,
        pool_timeout=0.2,
    )
    try:
        with engine.connect():
            exc = _raised(engine.connect)
    finally:
        engine.dispose()
    assert isinstance(exc, sa.exc.TimeoutError)
    assert is_transient(exc)


def test_plain_errors_are_not_transient() -> None:
    """Errors that have nothing to do with a database; StoreUnavailableError is transient."""
    assert is_transient(StoreUnavailableError())
    assert not is_transient(StaleStateError("gave up"))
    for exc in (ValueError("x"), KeyError("k"), RuntimeError("connection failed"), TimeoutError()):
        assert not is_transient(exc)
    assert is_transient(ConnectionResetError(104, "Connection reset by peer"))


# -- SQLite -----------------------------------------------------------------------------


def test_sqlite_lock_contention_is_transient(tmp_path: Path) -> None:
    """A second writer while another holds the write lock: "database is locked"."""
    path = tmp_path / "locked.sqlite"
    holder = sqlite3.connect(path, timeout=0.1, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    try:
        other = sqlite3.connect(path, timeout=0.1, isolation_level=None)
        raw = _raised(lambda: other.execute("BEGIN IMMEDIATE"))
        other.close()
        engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.1})
        try:
            with engine.connect() as conn:
                wrapped = _raised(lambda: conn.execute(sa.text("INSERT INTO t VALUES (1)")))
        finally:
            engine.dispose()
    finally:
        holder.close()
    assert isinstance(raw, sqlite3.OperationalError) and is_transient(raw)
    assert isinstance(wrapped, sa.exc.OperationalError) and is_transient(wrapped)

    plain = sqlite3.connect(path)
    try:
        missing = _raised(lambda: plain.execute("SELECT * FROM no_such_table"))
    finally:
        plain.close()
    assert isinstance(missing, sqlite3.OperationalError) and not is_transient(missing)
