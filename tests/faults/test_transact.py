"""A store transaction cut short by a transient fault is run again whole, and commits once."""

from __future__ import annotations

import sqlalchemy as sa

from helix_dbos.core.session import SessionState
from helix_dbos.store.migrate import upgrade
from helix_dbos.store.store import SessionStore
from tests.store.store_builders import session


async def test_a_transaction_cut_by_a_dropped_connection_runs_again_whole(cluster_url: str) -> None:
    """The server drops the connection in the middle of the transaction (its backend is
    terminated after the body's update, which is still queued then: ``test_transact_commit.py``
    cuts a transaction after its queue was sent): nothing of that attempt commits, the whole
    body runs again on a new connection, and its write lands exactly once."""
    upgrade(cluster_url)
    store = SessionStore.from_url(cluster_url)
    try:
        await store.create_session(session("s1"))
        attempts = 0

        def bump(states: dict[str, SessionState]) -> None:
            meta = states["s1"].metadata
            meta["n"] = int(meta.get("n", 0)) + 1

        async def body() -> int:
            nonlocal attempts
            attempts += 1
            await store.update(["s1"], bump)
            if attempts == 1:
                # A real fault: the server ends this session's backend (SQLSTATE 57P01).
                conn = store.bound()
                assert conn is not None
                await conn.execute(sa.text("SELECT pg_terminate_backend(pg_backend_pid())"))
            return attempts

        assert await store.transact(body) == 2
        state = await store.get("s1")
        assert state.metadata["n"] == 1
        assert state.version == 1
    finally:
        await store.close()
