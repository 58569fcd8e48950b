"""The store's connection pool recovers from dead connections: a process that was idle while
its pooled connections died (the backends were terminated, or the database restarted) serves
its next request without an error.

These tests fail until the store's engine checks a connection before using it (or reconnects
and retries on a disconnect): today the first statement on each dead pooled connection
raises, and the turn or request that ran it fails.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from helix_dbos.core.events import event
from helix_dbos.store import pg
from helix_dbos.store.migrate import upgrade
from helix_dbos.store.store import SessionStore
from helix_dbos.testing import capture_log_events
from tests.store.store_builders import session

from .pgcluster import PrivateCluster

pytestmark = pytest.mark.postgres_only

#: Enough connections for the pool to keep several open.
WARM = 4


async def _warm_pool(store: SessionStore) -> None:
    """Open and return ``WARM`` connections at once, so the pool keeps them."""
    conns = [await store.engine.connect() for _ in range(WARM)]
    for conn in conns:
        await conn.close()
    assert store.engine.pool.checkedin() >= WARM  # type: ignore[attr-defined]


async def test_store_recovers_from_terminated_backends(
    cluster: PrivateCluster, cluster_url: str
) -> None:
    """pg_terminate_backend every pooled connection; every following read succeeds."""
    upgrade(cluster_url)
    store = SessionStore.from_url(cluster_url)
    try:
        await _warm_pool(store)
        assert cluster.terminate_backends(cluster_url.rpartition("/")[2]) >= WARM
        for _ in range(WARM + 1):
            assert await store.list_sessions() == []
    finally:
        await store.close()


async def test_store_recovers_after_a_database_restart(
    cluster: PrivateCluster, cluster_url: str
) -> None:
    """The database restarts while the process is idle; the next reads succeed."""
    upgrade(cluster_url)
    store = SessionStore.from_url(cluster_url)
    try:
        await _warm_pool(store)
        cluster.stop(mode="fast")
        cluster.start()
        for _ in range(WARM + 1):
            assert await store.list_sessions() == []
    finally:
        await store.close()


async def test_a_statement_on_the_driver_connection_hands_a_dead_connection_to_the_pool(
    cluster: PrivateCluster, cluster_url: str
) -> None:
    """The store's hot statements go to psycopg directly (``store/pg.py``). One that meets a
    terminated backend fails as a SQLAlchemy statement would: marked invalidated (so it is
    retried as transient), with the pool's other dead connections invalidated too, so the
    next reads succeed without meeting another one."""
    upgrade(cluster_url)
    store = SessionStore.from_url(cluster_url)
    try:
        await _warm_pool(store)
        assert cluster.terminate_backends(cluster_url.rpartition("/")[2]) >= WARM
        async with store.engine.connect() as conn:
            with pytest.raises(sa.exc.DBAPIError) as info:
                await pg.fetch(conn, pg.STATE_BY_ID, ("missing",))
        assert info.value.connection_invalidated
        with capture_log_events() as logged:
            for _ in range(WARM + 1):
                assert await store.load("missing") is None
                assert await store.transact(lambda: store.get_checkpoint("x")) is None
        assert [e for e in logged if e["event"] == "store.retrying"] == []
    finally:
        await store.close()


async def test_reads_and_transactions_recover_from_terminated_backends(
    cluster: PrivateCluster, cluster_url: str
) -> None:
    """Every pooled connection is terminated; the next reads and step commits on the driver
    path succeed (retried on a fresh connection)."""
    upgrade(cluster_url)
    store = SessionStore.from_url(cluster_url)
    try:
        await store.create_session(session("s1"))
        await _warm_pool(store)
        assert cluster.terminate_backends(cluster_url.rpartition("/")[2]) >= WARM

        async def commit() -> int:
            await store.update(["s1"], lambda s: None)
            return await store.append_events("s1", None, [event("text")])

        for n in range(1, WARM + 2):
            assert (await store.get("s1")).version == n - 1
            assert await store.transact(commit) == n
    finally:
        await store.close()
