"""Lean transactions and reads on Postgres (``pg.LeanPool``, ``pg.LeanTransaction``): driver
connections in autocommit mode, ``BEGIN`` only before a statement that is not the last, a
failed transaction rolled back, a broken connection replaced."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
import pytest

from helix_dbos.core.session import SessionState
from helix_dbos.store import pg
from helix_dbos.store.store import SessionStore
from tests.store.store_builders import session


def _touch(states: dict[str, SessionState]) -> None:
    states["s1"].metadata["touched"] = states["s1"].metadata.get("touched", 0) + 1


async def test_a_lean_transaction_of_one_statement_sends_no_begin(
    pg_store: SessionStore, sent: list[str]
) -> None:
    """A commit swapping a row read earlier is one statement, alone; a commit that locks the
    row first is BEGIN, the lock, the write and COMMIT, in that order."""
    await pg_store.create_session(session("s1"))
    state = await pg_store.get("s1")
    sent.clear()
    await pg_store.transact(lambda: pg_store.update(["s1"], _touch), read=[state])
    assert len(sent) == 1 and "cas_states" in sent[0], sent
    sent.clear()
    await pg_store.transact(lambda: pg_store.update(["s1"], _touch))
    assert sent[0] == "BEGIN" and "FOR UPDATE" in sent[1], sent
    assert "cas_states" in sent[2] and sent[3] == "COMMIT", sent
    assert (await pg_store.get("s1")).metadata["touched"] == 2


async def test_a_lean_transaction_is_atomic_and_rolls_back(
    pg_store: SessionStore, sent: list[str]
) -> None:
    """A body that fails after its writes were sent leaves nothing behind, and its connection
    goes back to the pool outside any transaction (the next transaction works on it)."""
    await pg_store.create_session(session("s1"))

    async def fails() -> None:
        await pg_store.update(["s1"], _touch)
        await pg_store.load("s1")  # sends the queued write first, in the transaction
        raise RuntimeError("after the write")

    sent.clear()
    with pytest.raises(RuntimeError):
        await pg_store.transact(fails)
    assert "ROLLBACK" in sent
    assert "touched" not in (await pg_store.get("s1")).metadata
    await pg_store.transact(lambda: pg_store.update(["s1"], _touch))
    assert (await pg_store.get("s1")).metadata["touched"] == 1


async def test_a_broken_lean_connection_is_replaced(
    pg_store: SessionStore, migrated_pg_url: str
) -> None:
    """The server ends the pool's connection (a restart, an administrator): the next read
    fails on it, is retried on a new connection and answers, and so does a lean commit."""
    await pg_store.create_session(session("s1"))
    assert await pg_store.load("s1") is not None  # opens the pool's connection
    with psycopg.connect(migrated_pg_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    assert (await pg_store.get("s1")).session_id == "s1"
    await pg_store.transact(lambda: pg_store.update(["s1"], _touch))
    assert (await pg_store.get("s1")).metadata["touched"] == 1


async def test_a_cancelled_read_closes_only_its_own_connection(
    migrated_pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read cancelled mid-statement (a stream whose client left) leaves its connection
    broken, as the driver does: only that one is closed and replaced at once, and the idle
    ones are kept. (A connection that broke otherwise closes the idle
    ones too: the server may have restarted.)"""
    pool = pg.LeanPool(migrated_pg_url, 4)
    try:
        await asyncio.gather(pool.fetch("SELECT 1", ()), pool.fetch("SELECT 1", ()))
        opened: list[str] = []
        connect = psycopg.AsyncConnection.connect

        async def counted(*args: Any, **kwargs: Any) -> Any:
            opened.append("connect")
            return await connect(*args, **kwargs)

        monkeypatch.setattr(psycopg.AsyncConnection, "connect", counted)
        leased = asyncio.Event()

        async def cancelled_mid_statement() -> None:
            async with pool.lease() as driver:
                driver.pgconn.finish()  # what the driver leaves of a cancelled statement
                leased.set()
                await asyncio.sleep(30)

        task = asyncio.ensure_future(cancelled_mid_statement())
        await leased.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert await pool.fetch("SELECT 2", ()) == [(2,)]
        # The one connection opened is the cancelled one's replacement, opened at once (off
        # the next caller's way): two callers at once then find two idle connections, as before.
        await asyncio.sleep(0.5)
        assert opened == ["connect"]
        await asyncio.gather(*(pool.fetch("SELECT 3", ()) for _ in range(2)))
        assert opened == ["connect"]
    finally:
        await pool.close()


async def test_lean_statements_are_prepared_once_with_one_generic_plan(
    migrated_pg_url: str,
) -> None:
    """A lean connection prepares a statement on its first use and keeps one generic plan
    for it (planning each call anew cost a third of the batch's statement), and the URL's own
    server options are kept beside that setting."""
    url = migrated_pg_url + ("&" if "?" in migrated_pg_url else "?")
    pool = pg.LeanPool(url + "options=-c%20statement_timeout%3D12345", 2)
    try:
        settings = await pool.fetch(
            "SELECT current_setting('plan_cache_mode'), current_setting('statement_timeout')", ()
        )
        assert settings == [("force_generic_plan", "12345ms")]
        async with pool.lease() as driver:
            await driver.execute(
                "SELECT session_id FROM __agents_states WHERE session_id = %s", ("x",)
            )
            cur = await driver.execute(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                ("%FROM __agents_states WHERE session_id = $1%",),
            )
            assert await cur.fetchone() == (1,)
    finally:
        await pool.close()
