"""The fleet's parts in one process: the claim's compare-and-swap, the NOTIFY fan-out, the
executors table, and the submit that finds its turn's process dead."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from helix_dbos.config import HelixSettings
from helix_dbos.runtime._facade.event_signals import EventSignals
from helix_dbos.runtime._operations.fleet import Fleet, list_executors
from helix_dbos.store import reuse_event
from helix_dbos.store.migrate import upgrade
from helix_dbos.store.schema import executors
from helix_dbos.store.store import SessionStore


async def _store(url: str) -> SessionStore:
    await asyncio.to_thread(upgrade, url)
    return SessionStore.from_url(url)


async def _dead_row(store: SessionStore, executor_id: str, version: str = "v1") -> None:
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    async with store.engine.begin() as conn:
        await conn.execute(
            executors.insert().values(
                executor_id=executor_id,
                application_version=version,
                started_at=long_ago,
                heartbeat_at=long_ago,
            )
        )


async def test_racing_claims_have_one_winner(pg_url: str) -> None:
    """Eight live processes claim one dead executor at once: exactly one wins, and a live
    executor cannot be claimed at all."""
    store = await _store(pg_url)
    try:
        await _dead_row(store, "dead")
        for i in range(8):  # the claimers are live executors themselves
            await Fleet(HelixSettings(database_url=pg_url, executor_id=f"s{i}"), store).register()

        async def claim(me: str) -> bool:
            async with store.writing():
                return await store.fleet.claim("dead", "v1", me, 15.0)

        wins = await asyncio.gather(*(claim(f"s{i}") for i in range(8)))
        assert sum(wins) == 1
        async with store.writing():
            # s3 is live
            assert not await store.fleet.claim("s3", "v1", "s4", 15.0)
        found = {e.executor_id: e for e in await list_executors(store, 15.0, include_gone=True)}
        assert found["dead"].state == "adopted"
        assert found["dead"].adopted_by == f"s{wins.index(True)}"
        assert found["s0"].state == "live"
    finally:
        await store.close()


async def test_a_stopped_executor_is_adoptable_at_once(pg_url: str) -> None:
    """A clean stop marks the row stopped: no need to wait out the heartbeat window."""
    store = await _store(pg_url)
    try:
        gone = Fleet(HelixSettings(database_url=pg_url, executor_id="gone"), store)
        await gone.register()
        await gone.stop()
        async with store.writing():
            assert await store.fleet.claim("gone", "v1", "me", 15.0)
    finally:
        await store.close()


async def test_events_commit_wakes_subscribers_of_that_session_only(pg_url: str) -> None:
    """An insert into __agents_events, from any connection, sets the signal of that
    session's subscribers once it commits; other sessions' subscribers stay asleep."""
    store = await _store(pg_url)
    settings = HelixSettings(database_url=pg_url)
    signals = EventSignals(settings.urls)
    insert = sa.text(
        "INSERT INTO __agents_events (session_id, sequence, type, data, created_at) "
        "VALUES (:s, 1, 'x', '{}', now())"
    )
    try:
        async with (
            signals.subscribe("s1") as one,
            signals.subscribe("s2") as two,
            signals.subscribe("probe") as probe,
        ):
            assert one is not None and two is not None and probe is not None
            assert signals.available
            async with store.engine.begin() as conn:
                await conn.execute(insert, {"s": "s1"})
                # A probe's event commits meanwhile, from another connection, and wakes its
                # subscriber: a wake-up of s1's insert, sent before it, would have come first.
                async with store.engine.begin() as other:
                    await other.execute(insert, {"s": "probe"})
                await asyncio.wait_for(probe.wait(), 10)
                assert not one.is_set()  # not before the commit
            await asyncio.wait_for(one.wait(), 10)
            assert not two.is_set()
    finally:
        await signals.close()
        await store.close()


async def test_sqlite_streams_poll(sqlite_url: str) -> None:
    """SQLite has no NOTIFY: subscribers get no signal and poll."""
    signals = EventSignals(HelixSettings(database_url=sqlite_url).urls)
    async with signals.subscribe("s1") as signal:
        assert signal is None
    assert not signals.available


async def test_the_fleet_pages_sql_runs(pg_url: str) -> None:
    """Every SQL block of docs/fleet.md runs on a database at head, and the fleet query sees
    a registered executor as live."""
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "fleet.md").read_text()
    blocks = re.findall(r"```sql\n(.*?)```", doc, re.S)
    assert len(blocks) == 2
    store = await _store(pg_url)
    try:
        await Fleet(HelixSettings(database_url=pg_url, executor_id="doc-exec"), store).register()
        async with store.engine.connect() as conn:
            fleet = (await conn.execute(sa.text(blocks[0]))).all()
            assert [(r.executor_id, r.live) for r in fleet] == [("doc-exec", True)]
            assert (await conn.execute(sa.text(blocks[1]))).all() == []
    finally:
        await store.close()


async def test_a_runtime_on_sqlite_is_one_live_executor(sqlite_url: str) -> None:
    """The embedded backend runs the same heartbeat and sweep (one machine, its clock)."""
    from helix_dbos.demo import demo_agents
    from helix_dbos.runtime import AgentRuntime

    runtime = AgentRuntime(demo_agents(), HelixSettings(database_url=sqlite_url))
    await runtime.launch()
    try:
        assert runtime.fleet is not None
        await runtime.fleet.heartbeat()
        assert await runtime.fleet.sweep() == []
        found = await list_executors(runtime.store, 15.0)
        assert [(e.executor_id, e.state) for e in found] == [(runtime.settings.executor_id, "live")]
    finally:
        await runtime.shutdown()


async def test_a_runtime_adopts_no_turn_of_an_agent_it_does_not_define(sqlite_url: str) -> None:
    """A stopped process left an ``editor`` turn parked. A runtime that defines only
    ``helper`` does not take it (it could not run it): it says so once, naming the agent, and
    the turn stays parked; a runtime that defines ``editor`` adopts it."""
    from helix_dbos import define_agent
    from helix_dbos.demo import demo_agents
    from helix_dbos.llm import ScriptedLLM, reply
    from helix_dbos.runtime import AgentRuntime
    from helix_dbos.testing import capture_log_events

    def settings(executor_id: str) -> HelixSettings:
        # DBOS shuts the loop's default executor down with each runtime: a fresh one each.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor())
        return HelixSettings(database_url=sqlite_url, executor_id=executor_id)

    demo = AgentRuntime(demo_agents(), settings("demo-exec"))
    await demo.launch()
    try:
        turn = await demo.start("editor", 'replace "teh" with "the"')
        await demo.wait_for_pending(turn.session_id)
    finally:
        await demo.shutdown()  # stopped: its turns are adoptable at once

    helper = define_agent("helper", llm=ScriptedLLM(lambda request: reply("hi")))
    other = AgentRuntime([helper], settings("other-exec"))
    with capture_log_events() as events:
        await other.launch()
        try:
            assert other.fleet is not None
            assert await other.fleet.sweep() == []
            assert await other.fleet.sweep() == []
            assert (await other.status(turn.session_id))["status"] == "suspended_client_tool"
        finally:
            await other.shutdown()
    (skipped,) = [e for e in events if e["event"] == "fleet.adoption_skipped"]
    assert skipped["agents"] == ["editor"]
    assert skipped["fromExecutor"] == "demo-exec"
    assert skipped["level"] == "WARNING"
    assert not [e for e in events if e["event"] == "fleet.adopted"]

    editor = AgentRuntime(demo_agents(), settings("editor-exec"))
    await editor.launch()
    try:
        assert editor.fleet is not None
        await editor.fleet.sweep()
        async with editor.store.reading():
            found = await list_executors(editor.store, 15.0, include_gone=True)
        assert {e.executor_id: e.adopted_by for e in found}["demo-exec"] == "editor-exec"
    finally:
        await editor.shutdown()


def test_a_restart_on_this_host_is_not_a_reused_id() -> None:
    """The id of an executor that looks live: its process gone from this host is a restart
    (``scripts/demo`` run again after a kill: INFO); still running, or on another host, it
    may be two processes with one id (WARNING)."""
    import os
    import socket
    import subprocess
    import sys

    from helix_dbos.observability.log import EVENT_LEVELS

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    here = socket.gethostname()
    assert reuse_event(int(gone.stdout), here) == "fleet.executor_restarted"
    assert reuse_event(os.getpid(), here) == "fleet.executor_id_reused"
    assert reuse_event(int(gone.stdout), "elsewhere") == "fleet.executor_id_reused"
    assert reuse_event(None, None) == "fleet.executor_id_reused"
    assert EVENT_LEVELS["fleet.executor_restarted"] == logging.INFO


async def test_a_shutdown_whose_stop_mark_fails_still_closes(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executor's stop mark cannot be written at shutdown (here SQLite's lock, as a busy
    machine once met it): the shutdown logs it and goes on to close the store, and the
    executor keeps no stop mark (it is judged by its heartbeat's age, as a dead one)."""
    from helix_dbos.demo import demo_agents
    from helix_dbos.runtime import AgentRuntime
    from helix_dbos.store import fleet_tables
    from helix_dbos.testing import capture_log_events

    async def locked(*_args: object) -> None:
        raise sa.exc.OperationalError("UPDATE executors", {}, Exception("database is locked"))

    runtime = AgentRuntime(demo_agents(), HelixSettings(database_url=sqlite_url))
    await runtime.launch()
    me = runtime.settings.executor_id
    monkeypatch.setattr(fleet_tables.FleetTables, "mark_stopped", locked)
    with capture_log_events() as events:
        await runtime.shutdown()
    [failed] = [e for e in events if e["event"] == "fleet.stop_mark_failed"]
    assert failed["executorId"] == me and "database is locked" in failed["error"]
    assert runtime.fleet is None
    store = SessionStore.from_url(sqlite_url)
    try:
        [found] = await list_executors(store, 15.0, include_gone=True)
        assert (found.executor_id, found.stopped_at) == (me, None)
    finally:
        await store.close()
