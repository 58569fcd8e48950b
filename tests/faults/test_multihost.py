"""The runtime reaches its database through a URL naming two servers, in each form libpq and
SQLAlchemy read, and skips a server that does not answer within the connect timeout.

Two private clusters made by the test: the first one named is read-only (its default
transaction is read-only, as a hot standby's is), the second writable. With
``target_session_attrs=read-write`` every connection must land on the second: the
migration's, the store's engine and lean pools, and DBOS's. A real ``helix-dbos serve`` runs a
turn of the ``editor`` demo to its end, and the rows are found on the writable server only.
"""

from __future__ import annotations

import asyncio
import random
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from helix_dbos.config import parse_database_url
from helix_dbos.core.pg_url import CONNECT_TIMEOUT_SECONDS
from helix_dbos.store.migrate import current_revision, head_revision, upgrade
from helix_dbos.store.store import SessionStore

from .pgcluster import PrivateCluster, pg_available
from .serve import Answer, Client, EditorUser, ServeProcess, check_database, editor_message

pytestmark = [pytest.mark.slow, pytest.mark.postgres_only]


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[PrivateCluster, PrivateCluster]]:
    """(read-only, writable): two clusters on free ports."""
    if not pg_available():
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    with (
        PrivateCluster.create("default_transaction_read_only = on\n") as read_only,
        PrivateCluster.create() as writable,
    ):
        yield read_only, writable


def _database_on_both(pair: tuple[PrivateCluster, PrivateCluster]) -> str:
    name = f"helix_multi_{uuid.uuid4().hex[:10]}"
    for cluster in pair:
        with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = off")
            conn.execute(f'CREATE DATABASE "{name}"')
    return name


def _forms(ports: tuple[int, int], name: str) -> dict[str, str]:
    first, second = ports
    attrs = "target_session_attrs=read-write"
    return {
        "before": f"postgresql://postgres@127.0.0.1:{first},127.0.0.1:{second}/{name}?{attrs}",
        "query": f"postgresql://postgres@/{name}?host=127.0.0.1,127.0.0.1"
        f"&port={first},{second}&{attrs}",
        "repeated": f"postgresql://postgres@/{name}?host=127.0.0.1:{first}"
        f"&host=127.0.0.1:{second}&{attrs}",
    }


def _has_tables(cluster: PrivateCluster, name: str) -> bool:
    with psycopg.connect(cluster.url(name)) as conn:
        row = conn.execute("SELECT to_regclass('__agents_states') IS NOT NULL").fetchone()
        return bool(row and row[0])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("form", ["before", "query", "repeated"])
async def test_serve_runs_a_turn_through_a_two_host_url(
    pair: tuple[PrivateCluster, PrivateCluster], form: str, tmp_path: Path
) -> None:
    read_only, writable = pair
    name = _database_on_both(pair)
    url = _forms((read_only.port, writable.port), name)[form]
    # `helix-dbos migrate`'s path: the sync engine.
    await asyncio.to_thread(upgrade, url)
    assert await asyncio.to_thread(current_revision, url) == head_revision()
    # The store's engine and both lean pools.
    store = SessionStore.from_url(url)
    try:
        assert await store.list_sessions() == []
        lean = store._db.lean
        assert lean is not None
        rows = await lean.fetch(
            "SELECT inet_server_port(), current_setting('transaction_read_only')", ()
        )
        assert list(rows) == [(writable.port, "off")]
    finally:
        await store.close()
    # A served turn: DBOS's engine and client, the store, the keeper, the fleet.
    server = ServeProcess(url, tmp_path)
    server.start()
    client = Client(server.base_url, patience=120)
    stored: list[Answer] = []
    user = EditorUser(client, random.Random(7), stored, {})
    sid = f"multi-{form}"
    try:
        await user.run(sid, editor_message(1), timeout=120)
    finally:
        await client.close()
        await asyncio.to_thread(server.stop)
    found = check_database(writable.url(name), [sid], stored)
    assert found.statuses == {"completed": 1}, found.summary()
    assert not found.lost_answers and not found.duplicate_tool_results, found.summary()
    with psycopg.connect(writable.url(name)) as conn:
        workflows = conn.execute("SELECT count(*) FROM dbos.workflow_status").fetchone()
    assert workflows is not None and workflows[0] >= 1
    assert not _has_tables(read_only, name)


async def test_a_server_that_never_answers_costs_the_connect_timeout(
    pair: tuple[PrivateCluster, PrivateCluster],
) -> None:
    """The first host accepts TCP connections and never says a word (a primary whose host
    hangs); the store reaches the second host after the connect timeout instead of the
    driver's default of 130 s, which the test's own bound (60 s) would not wait for."""
    _, writable = pair
    name = _database_on_both(pair)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        url = f"postgresql://postgres@127.0.0.1:{port},127.0.0.1:{writable.port}/{name}"
        # The URL sets no timeout: the one the runtime adds is what bounds each attempt.
        assert f"connect_timeout={CONNECT_TIMEOUT_SECONDS}" in parse_database_url(url).user
        # Migrate's sync engine, then the store's engine and lean pool.
        await asyncio.wait_for(asyncio.to_thread(upgrade, url), 60)
        store = SessionStore.from_url(url)
        try:
            lean = store._db.lean
            assert lean is not None
            rows = await asyncio.wait_for(lean.fetch("SELECT inet_server_port()", ()), 60)
            assert list(rows) == [(writable.port,)]
            assert await asyncio.wait_for(store.list_sessions(), 60) == []
        finally:
            await store.close()
