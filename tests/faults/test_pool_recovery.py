"""The store's connection pool recovers from dead connections: a process that was idle while
its pooled connections died (the backends were terminated, or the database restarted) serves
its next request without an error.

These tests fail until the store's engine checks a connection before using it (or reconnects
and retries on a disconnect): today the first statement on each dead pooled connection
raises, and the turn or request that ran it fails.
"""

from __future__ import annotations

import pytest

from helix_dbos.store.migrate import upgrade
from helix_dbos.store.store import SessionStore

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
