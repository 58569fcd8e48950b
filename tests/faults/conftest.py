"""Fixtures of the fault tests: a private Postgres cluster the tests may stop and start.

The cluster is made once per test module (initdb takes a couple of seconds) and always torn
down; each test gets its own database on it. The shared server is never stopped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .pgcluster import PrivateCluster, pg_available


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateCluster]:
    """A private cluster on a free port, running (restarted if a test left it stopped)."""
    if not pg_available():
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    with PrivateCluster.create() as made:
        yield made


@pytest.fixture
def cluster_url(cluster: PrivateCluster) -> str:
    """A fresh database on the private cluster (started again first if a test stopped it)."""
    if not cluster.is_running():
        cluster.start()
    return cluster.create_database()
