"""Retention (``store/retention.py``): ended session trees past their retention are deleted
with every row of theirs, DBOS's records of their workflows included; nothing that must stay
is: an active turn, a turn parked live, a hibernated turn, a persistent agent's session, a
sub-agent or a companion of a live root, a completed call's tombstone still in its
retention. On Postgres and SQLite; two sweepers on Postgres delete each session once; the
runtime's sweeper and ``helix-dbos prune`` (dry run, then for real) do the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.session import SessionState
from helix_dbos.llm.scripted import ScriptedLLM, reply
from helix_dbos.runtime import AgentRuntime
from helix_dbos.store.retention import Retention, sweep, sweep_batch
from helix_dbos.store.store import SessionStore
from tests.runtime.agents import EditIn, EditOut, batch_script, editor_agent
from tests.runtime.conftest import MakeRuntime
from tests.runtime.persistent_agents import keeper_agent
from tests.runtime.retention_rows import rows_of, run_cli
from tests.support.agent_tree import tree


def agents() -> list[Any]:
    chat = define_agent("chat", llm=ScriptedLLM(lambda request: reply("ok")))
    sleeper = define_agent(
        "sleeper",
        llm=ScriptedLLM(batch_script),
        tools=[define_tool("edit", "Apply an edit", EditIn, EditOut, execute="client")],
        hibernate_after=0,
    )
    root, _ = tree()
    return [chat, sleeper, editor_agent(), keeper_agent(idle_ttl=300), root]


async def _wait(probe: Callable[[], Any], seconds: float = 30.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        got = await probe()
        if got:
            return got
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def _status(rt: AgentRuntime, sid: str, *want: str) -> None:
    async def probe() -> bool:
        return (await rt.store.get(sid)).status in want

    await _wait(probe)


class Sessions:
    """One session of every kind, made by real turns (a companion row by the store)."""

    def __init__(self) -> None:
        self.ended: list[str] = []
        self.tombstoned = ""
        self.parked = ""
        self.hibernated = ""
        self.persistent = ""
        self.tree_root = ""
        self.ended_sub_agent = ""
        self.companion = ""

    @property
    def kept(self) -> dict[str, str]:
        return {
            "active or parked live": self.parked,
            "hibernated": self.hibernated,
            "persistent": self.persistent,
            "live root of a tree": self.tree_root,
            "ended sub-agent of a live root": self.ended_sub_agent,
            "ended companion of a live root": self.companion,
        }


async def make_sessions(rt: AgentRuntime, ended: int = 2) -> Sessions:
    made = Sessions()
    for _ in range(ended):
        handle = await rt.start("chat", "hello")
        await handle.result()
        made.ended.append(handle.session_id)
    # Completed, with a completed call's tombstone (kept for a day by default).
    handle = await rt.start("editor", "1 edit")
    [call] = await rt.wait_for_pending(handle.session_id)
    await rt.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
    await _status(rt, handle.session_id, "completed")
    made.tombstoned = handle.session_id
    # Parked live (its hot window is the runtime's 60 s).
    handle = await rt.start("editor", "1 edit")
    await rt.wait_for_pending(handle.session_id)
    made.parked = handle.session_id
    handle = await rt.start("sleeper", "1 edit")
    assert (await handle.workflow.get_result())["outcome"] == "hibernated"
    made.hibernated = handle.session_id
    # A persistent agent's session, between turns: its workflow waits on its inbox.
    handle = await rt.start("keeper", "hello")
    await _status(rt, handle.session_id, "completed", "idle")
    made.persistent = handle.session_id
    # A tree whose root is live: its grandchild ended (as if it had answered), and a
    # companion of the root that ended.
    handle = await rt.start("root", "go")
    await rt.wait_for_pending(handle.session_id)
    made.tree_root = handle.session_id
    below = await rt.store.descendants(handle.session_id)
    grandchild = next(s for s in below if s.agent_type == "grandchild")

    def end(states: dict[str, SessionState]) -> bool:
        states[grandchild.session_id].status = "completed"
        return True

    await rt.store.update([grandchild.session_id], end)
    made.ended_sub_agent = grandchild.session_id
    companion = await rt.store.create_session(
        SessionState(
            session_id=f"{handle.session_id}-companion",
            agent_type="chat",
            root_session_id=handle.session_id,
            parent_session_id=handle.session_id,
            status="completed",
        )
    )
    made.companion = companion.session_id
    return made


async def test_only_ended_trees_past_their_retention_go(make_runtime: MakeRuntime) -> None:
    rt = await make_runtime(agents(), retention_sweep_seconds=0)
    made = await make_sessions(rt)
    store = rt.store
    everyone = [*made.ended, made.tombstoned, *made.kept.values()]
    before = {sid: await rows_of(store, sid) for sid in everyone}
    for sid in made.ended:
        assert before[sid]["__agents_messages"] and before[sid]["workflow_status"]
        assert before[sid]["__agents_usage"] and before[sid]["__agents_events"]
    # DBOS's step records (the park's recv and sleep) of the answered turn.
    assert before[made.tombstoned]["operation_outputs"]
    # No retention set: nothing goes.
    assert (await sweep(store, Retention())).trees == 0
    # Retention 0 for every agent, persistent ones not named (as `helix-dbos prune` runs).
    done = await sweep(store, Retention(default=0.0), batch=2)
    assert done.trees == len(made.ended), done
    for sid in made.ended:
        assert set((await rows_of(store, sid)).values()) == {0}, sid
    for kind, sid in made.kept.items():
        assert await rows_of(store, sid) == before[sid], kind
    assert await rows_of(store, made.tombstoned) == before[made.tombstoned]
    # Two days on, the tombstone's retention (a day) has passed: that session goes too;
    # every live one stays, however old.
    later = datetime.now(UTC) + timedelta(days=2)
    done = await sweep_batch(store, Retention(default=0.0), batch=50, now=later)
    assert done.trees == 1 and set((await rows_of(store, made.tombstoned)).values()) == {0}
    for kind, sid in made.kept.items():
        assert await rows_of(store, sid) == before[sid], kind


async def test_per_agent_retention_and_the_dry_run(make_runtime: MakeRuntime) -> None:
    rt = await make_runtime(agents(), retention_sweep_seconds=0)
    ended = []
    for _ in range(3):
        handle = await rt.start("chat", "hello")
        await handle.result()
        ended.append(handle.session_id)
    store = rt.store
    # The chat agent keeps its sessions for a day: a default of 0 does not touch them.
    kept = Retention(default=0.0, by_agent={"chat": 86400.0})
    assert (await sweep(store, kept)).trees == 0
    never = Retention(default=0.0, by_agent={"chat": None})
    assert (await sweep(store, never)).trees == 0
    dry = await sweep(store, Retention(by_agent={"chat": 0.0}), dry_run=True, batch=2)
    assert dry.trees == 3 and dry.rows["__agents_states"] == 3
    for sid in ended:
        assert (await rows_of(store, sid))["__agents_states"] == 1
    done = await sweep(store, Retention(by_agent={"chat": 0.0}))
    assert done.trees == 3


@pytest.mark.postgres_only
async def test_two_sweepers_delete_each_session_once(
    pg_url: str, make_runtime: MakeRuntime
) -> None:
    # pg_url first: it is dropped after the runtime's teardown, not before.
    rt = await make_runtime(agents(), retention_sweep_seconds=0, database_url=pg_url)
    for _ in range(24):
        handle = await rt.start("chat", "hello")
        await handle.result()
    first, second = SessionStore.from_url(pg_url), SessionStore.from_url(pg_url)
    try:
        results = await asyncio.gather(
            sweep(first, Retention(default=0.0), batch=3),
            sweep(second, Retention(default=0.0), batch=3),
        )
    finally:
        await first.close()
        await second.close()
    assert sum(r.trees for r in results) == 24, results
    assert sum(r.rows["__agents_states"] for r in results) == 24
    assert sum(r.rows["workflow_status"] for r in results) == 24


async def test_the_runtime_sweeper_deletes_what_its_retention_says(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime(
        agents(),
        retention_sweep_seconds=0.2,
        retention_by_agent={"chat": 0.0},
    )
    handle = await rt.start("chat", "hello")
    await handle.result()
    parked = await rt.start("editor", "1 edit")
    await rt.wait_for_pending(parked.session_id)

    async def gone() -> bool:
        return (await rows_of(rt.store, handle.session_id))["__agents_states"] == 0

    await _wait(gone)
    assert (await rows_of(rt.store, parked.session_id))["__agents_states"] == 1


async def test_prune_command(make_runtime: MakeRuntime, db_url: str) -> None:
    rt = await make_runtime(agents(), retention_sweep_seconds=0)
    handle = await rt.start("chat", "hello")
    await handle.result()
    live = await rt.start("sleeper", "1 edit")
    assert (await live.workflow.get_result())["outcome"] == "hibernated"

    def prune(*extra: str) -> dict[str, Any]:
        argv = ["prune", "--older-than", "0s", "--database-url", db_url, "--json", *extra]
        return run_cli(argv)

    dry = await asyncio.to_thread(prune, "--dry-run")
    assert (dry["trees"], dry["dryRun"]) == (1, True)
    assert (await rows_of(rt.store, handle.session_id))["__agents_states"] == 1
    done = await asyncio.to_thread(prune)
    assert done["trees"] == 1 and done["rows"]["workflow_status"] >= 1
    assert set((await rows_of(rt.store, handle.session_id)).values()) == {0}
    assert (await rows_of(rt.store, live.session_id))["__agents_states"] == 1


@pytest.mark.postgres_only
async def test_the_runbooks_size_queries_see_the_sweep(
    pg_url: str, make_runtime: MakeRuntime
) -> None:
    """docs/runbook.md's table sizes and oldest rows, before and after a sweep."""
    import psycopg

    from tests.runbook_sql import runbook_sql

    rt = await make_runtime(agents(), retention_sweep_seconds=0, database_url=pg_url)
    for _ in range(3):
        await (await rt.start("chat", "hello")).result()
    blocks = runbook_sql()

    def run(name: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(pg_url) as conn:
            return list(conn.execute(blocks[name][1]).fetchall())

    sizes = {row[0] for row in run("table-sizes")}
    assert {"public.__agents_states", "dbos.workflow_status"} <= sizes
    before = {row[0]: row[2] for row in run("oldest-rows")}
    assert before["completed"] == 3 and before["dbos:SUCCESS"] >= 3
    await sweep(rt.store, Retention(default=0.0))
    after = {row[0]: row[2] for row in run("oldest-rows")}
    assert "completed" not in after and "dbos:SUCCESS" not in after
