"""A store transaction whose backend dies after its queued writes were sent and before its
COMMIT runs again whole, and its writes land once (ARCHITECTURE.md, rule 12).

On Postgres a ``transact`` queues its writes and sends them as one statement just before
COMMIT (``store/batch.py``): the fault that matters is the one between that statement and the
COMMIT, when every write has reached the server and none has committed. Both paths are cut
there: SQLAlchemy's connections, and the lean path (``transact(lean=True)``, a driver
connection of ``pg.LeanPool``) that every hot commit of a turn, an entry or an answer takes.
The backend is terminated for real, on the private cluster of the fault tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from helix_dbos.core.messages import Message
from helix_dbos.core.session import SessionState
from helix_dbos.store import pg
from helix_dbos.store.migrate import upgrade
from helix_dbos.store.store import SessionStore
from tests.faults.pgcluster import PrivateCluster
from tests.store.store_builders import session


@pytest.fixture
async def store(cluster_url: str) -> AsyncIterator[SessionStore]:
    """A store on a migrated database of the private cluster."""
    upgrade(cluster_url)
    made = SessionStore.from_url(cluster_url)
    try:
        yield made
    finally:
        await made.close()


def _terminate(cluster: PrivateCluster, pid: int) -> None:
    """End backend ``pid`` and wait until it is gone (so the COMMIT meets a dead backend)."""
    with psycopg.connect(cluster.admin_url, autocommit=True) as admin:
        row = admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()
    assert row is not None and row[0] is True, f"backend {pid} was not terminated"


def _bump(states: dict[str, SessionState]) -> None:
    meta = states["s1"].metadata
    meta["n"] = int(meta.get("n", 0)) + 1


class _Body:
    """A transaction's body: lock the row (so the transaction is more than one statement),
    swap it, append a message and a checkpoint; counts its attempts."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self.attempts = 0

    async def __call__(self) -> int:
        self.attempts += 1
        await self.store.update(["s1"], _bump)  # no prior: BEGIN, lock, then swap
        await self.store.append_messages("s1", "r1", [Message(role="user", content="once")])
        await self.store.write_checkpoint(
            "s1", "r1", step_count=1, state={}, checkpoint_id="cp-once"
        )
        return self.attempts


class _EngineBody(_Body):
    """``_Body`` with a statement of SQLAlchemy's first: the unit runs on SQLAlchemy's
    connections (its driver-connection run stops at that statement, before anything is sent,
    and is not counted)."""

    async def __call__(self) -> int:
        conn = self.store.bound()
        assert conn is not None
        await conn.execute(sa.text("SELECT 1"))
        return await super().__call__()


async def _landed_once(store: SessionStore) -> None:
    state = await store.get("s1")
    assert state.metadata["n"] == 1
    assert state.version == 1
    assert [m.content for m in await store.load_messages("s1")] == ["once"]
    assert state.latest_checkpoint_id == "cp-once"


async def test_a_lean_commit_cut_after_its_flush_runs_again_whole(
    store: SessionStore, cluster: PrivateCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lean path: the queued writes were sent in the transaction, then its backend is
    terminated before COMMIT. Nothing of that attempt lands; the body runs again on a new
    connection and every write lands once."""
    await store.create_session(session("s1"))
    original = pg.LeanTransaction.commit
    cut: list[int] = []

    async def commit(self: pg.LeanTransaction) -> None:
        if not cut:
            assert self.began, "the body's transaction is more than one statement"
            cut.append(self.driver.info.backend_pid)
            _terminate(cluster, cut[0])
        await original(self)

    monkeypatch.setattr(pg.LeanTransaction, "commit", commit)
    body = _Body(store)
    assert await store.transact(body) == 2
    assert len(cut) == 1
    await _landed_once(store)


async def test_a_commit_cut_after_its_flush_runs_again_whole(
    store: SessionStore, cluster: PrivateCluster
) -> None:
    """SQLAlchemy's connections: the same cut, between the batch's statement and COMMIT."""
    await store.create_session(session("s1"))
    cut: list[int] = []

    def before_commit(conn: Any) -> None:
        if not cut:
            cut.append(conn.connection.driver_connection.info.backend_pid)
            _terminate(cluster, cut[0])

    sa.event.listen(store.engine.sync_engine, "commit", before_commit)
    body = _EngineBody(store)
    assert await store.transact(body) == 2
    assert len(cut) == 1
    await _landed_once(store)
