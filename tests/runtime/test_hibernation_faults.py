"""Hibernated turns across faults, on Postgres and SQLite: a continuation's start lost, a stop
while it starts, the reconciler, a keeper without the agent, answers racing the hot window's
end, process deaths, restarts and a rolling deploy.

The crash tests run a child process (``hibernation_worker``) that parks turns and dies
(SIGKILL, or ``os._exit`` at a chosen point); this process then launches a runtime with the
same executor id and version, as a restarted one, and drives the turns to their end. Nothing
may run twice: one continuation per hibernated batch, one tool result per call, one committed
model answer per step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS

from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import AgentRegistry
from helix_dbos.core.session import SessionState
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime, names
from helix_dbos.runtime._hibernated import keeper
from helix_dbos.runtime._submit import answer as submit
from helix_dbos.store.hibernated import due_sessions
from helix_dbos.store.store import SessionStore, now_ms
from helix_dbos.testing import capture_log_events
from tests.processes import reaped
from tests.runtime import hibernation_worker as worker
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import (
    agent,
    cold_turn,
    completed,
    continuations,
    hold_continuation_record,
    model_rows,
    script,
    tool_results,
    wait_until,
    workflow_result,
)

WORKER = Path(worker.__file__)
NEW_MESSAGE = "never mind, do Y instead"
BOUND = 60.0
"""Seconds any one wait of these tests may take: far above what each needs."""


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _lines(proc: subprocess.Popen[str], until: str) -> list[dict[str, Any]]:
    """The child's JSON lines up to the line ``until`` (which must come)."""
    assert proc.stdout is not None
    found: list[dict[str, Any]] = []
    for line in proc.stdout:
        if line.strip() == until:
            return found
        found.append(json.loads(line))
    proc.wait(timeout=BOUND)
    raise AssertionError(f"no {until!r}: {proc.stderr.read() if proc.stderr else ''}")


def _killed(*args: str, until: str) -> list[dict[str, Any]]:
    """Run the worker until it prints ``until``, then SIGKILL it: its JSON lines before."""
    with reaped(_spawn(*args)) as proc:
        lines = _lines(proc, until)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=BOUND)
    assert proc.returncode == -signal.SIGKILL
    return lines


@asynccontextmanager
async def restarted(
    settings: HelixSettings, llm: ScriptedLLM | None = None
) -> AsyncIterator[AgentRuntime]:
    """A launched runtime of the worker's agents (``llm`` counts this process's calls)."""
    runtime = AgentRuntime(worker.agents(llm), settings)
    await runtime.launch()
    try:
        yield runtime
    finally:
        await runtime.shutdown()


async def _answer_all(runtime: AgentRuntime, turn: dict[str, Any]) -> None:
    for n, tcid in enumerate(turn["calls"]):
        answer = await runtime.submit_tool_result(turn["session"], tcid, result={"applied": n})
        assert answer.status == "accepted", answer


async def _assert_once(runtime: AgentRuntime, turn: dict[str, Any], hibernated: bool) -> None:
    """The turn completed with one result per call and two committed model answers; a
    hibernated one through exactly one continuation, a hot one through none."""
    sid = turn["session"]
    assert (await runtime.wait(sid, timeout=BOUND))["status"] == "completed"
    assert await tool_results(runtime, sid) == turn["calls"]
    history = await runtime.messages(sid)
    assert history[-1].role == "assistant" and history[-1].content.startswith("results: ")
    assert await model_rows(runtime, sid) == 2
    found = [w.workflow_id for w in await continuations(sid)]
    run_id = turn["workflow"].rsplit(":", 1)[1]
    assert found == ([names.continuation_workflow_id(sid, run_id)] if hibernated else [])


# -- in this process ----------------------------------------------------------------------------


def no_continuation_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Submits commit as usual but start no continuation (as if their process died there)."""

    async def skipped(*args: Any) -> None:
        return None

    monkeypatch.setattr(submit, "start_continuation", skipped)


async def test_interrupt_between_the_last_answer_and_its_continuation(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last answer committed (the batch is due now) but its continuation did not start:
    a stop then removes the mark, and the deadline keeper finds nothing to start."""
    no_continuation_start(monkeypatch)
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm)], deadline_keeper_seconds=0)
    handle, (tcid,) = await cold_turn(runtime, "1 edit")
    sid = handle.session_id
    answer = await runtime.submit_tool_result(sid, tcid, result={"applied": 1})
    assert answer.continuation is not None and answer.continuation.kind == "new_run"
    assert (await runtime.session(sid)).metadata["hibernated"]["dueAt"] == 0
    await runtime.interrupt(sid)
    assert await keeper.keep_once(runtime.ctx) == 0
    assert await continuations(sid) == []
    state = await runtime.session(sid)
    assert state.status == "interrupted" and "hibernated" not in state.metadata
    assert await tool_results(runtime, sid) == [] and llm.calls == 1


async def test_drain_first_message_on_a_complete_hibernated_batch_follows_its_results(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch is complete but its continuation has not started (its submit's process died
    there): the message is accepted and waits in the row; the deadline keeper continues the
    turn, which commits the results, then the message, then calls the model once."""
    no_continuation_start(monkeypatch)
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm)], deadline_keeper_seconds=0)
    handle, calls = await cold_turn(runtime)
    sid = handle.session_id
    for n, tcid in enumerate(calls):
        await runtime.submit_tool_result(sid, tcid, result={"applied": n})
    resumed = await runtime.resume(sid, "with_message", NEW_MESSAGE)
    assert resumed.run_id == names.next_run_id(handle.run_id)
    assert await continuations(sid) == []
    assert await keeper.keep_once(runtime.ctx) == 1
    assert (await runtime.wait(sid, timeout=30))["status"] == "completed"
    history = await runtime.messages(sid)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert [m.tool_call_id for m in history if m.role == "tool"] == calls
    assert history[4].content == NEW_MESSAGE and llm.calls == 2
    assert len(await continuations(sid)) == 1


async def test_a_keeper_without_the_agent_leaves_a_due_batch_to_one_with_it(
    make_runtime: MakeRuntime,
) -> None:
    """A fleet whose processes run different agents: the keeper of a process that does not
    run the turn's agent must not hold its due batch back from one that does."""
    runtime = await make_runtime(
        [agent("cold", timeout=1.0), agent("other")], deadline_keeper_seconds=0
    )
    handle, _ = await cold_turn(runtime, "1 edit")
    foreign = dataclasses.replace(runtime.ctx, registry=AgentRegistry([agent("other")]))

    async def due() -> bool:
        return handle.session_id in await due_sessions(runtime.store, now_ms(), 10, ["cold"])

    assert await wait_until(due), "the batch never fell due"
    assert await keeper.keep_once(foreign) == 0
    assert await keeper.keep_once(runtime.ctx) == 1
    outcome = await completed(runtime, handle)
    assert outcome["text"] == "results: client_tool_timeout"


async def test_the_reconciler_leaves_a_hibernated_turn_alone(make_runtime: MakeRuntime) -> None:
    """A hibernated turn's first workflow has ended: that is no lost turn to fail or restart."""
    llm = ScriptedLLM(script)
    runtime = await make_runtime(
        [agent("cold", llm)], deadline_keeper_seconds=0, heal_interval_seconds=0
    )
    handle, (first, second) = await cold_turn(runtime)
    sid = handle.session_id
    await runtime.submit_tool_result(sid, first, result={"applied": 1})
    before = await runtime.session(sid)
    assert await runtime.heal(grace_seconds=0) == []
    after = await runtime.session(sid)
    assert after.version == before.version and after.metadata == before.metadata
    await runtime.submit_tool_result(sid, second, result={"applied": 2})
    await completed(runtime, handle)
    assert len(await continuations(sid)) == 1 and llm.calls == 2


async def _interrupted_while_held(
    runtime: AgentRuntime, llm: ScriptedLLM, reached: asyncio.Event, gate: asyncio.Event
) -> None:
    """Answer a cold turn's call, interrupt it once its continuation is held (``reached``),
    let the continuation go on (``gate``): it is fenced, writes nothing, and ends stopped."""
    handle, (tcid,) = await cold_turn(runtime, "1 edit")
    sid = handle.session_id
    await runtime.submit_tool_result(sid, tcid, result={"applied": 1})
    await asyncio.wait_for(reached.wait(), BOUND)
    await runtime.interrupt(sid)
    gate.set()
    outcome = await asyncio.wait_for(handle.result(), BOUND)
    assert outcome["outcome"] == "stopped"
    state = await runtime.session(sid)
    assert state.status == "interrupted" and "hibernated" not in state.metadata
    assert state.workflow_id == handle.workflow_id, "the fenced commit named nothing"
    assert await tool_results(runtime, sid) == [] and llm.calls == 1


async def test_a_stop_while_the_continuation_starts_fences_it(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupt lands after the continuation started, before its results commit: the
    commit is fenced, writing nothing, and the turn ends ``stopped``."""
    reached, gate = hold_continuation_record(monkeypatch)
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm)], deadline_keeper_seconds=0)
    await _interrupted_while_held(runtime, llm, reached, gate)


async def test_a_stop_after_the_continuations_read_fences_its_commit(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupt lands after the continuation read its record with the session's rows,
    before its results commit, which swaps from those rows: the swap fails, the commit reads
    the row again, is fenced and writes nothing, and the turn ends ``stopped``."""
    reached, gate = asyncio.Event(), asyncio.Event()
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm)], deadline_keeper_seconds=0)
    real = runtime.store.resume_recorded

    async def held(*args: Any) -> Any:
        read = await real(*args)
        reached.set()
        await gate.wait()
        return read

    monkeypatch.setattr(runtime.store, "resume_recorded", held)
    await _interrupted_while_held(runtime, llm, reached, gate)


async def test_answers_racing_the_end_of_the_hot_window(make_runtime: MakeRuntime) -> None:
    """Turns whose two answers land before, while and after their 0.2 s window ends: each
    turn ends once, hibernated (one continuation) or not (none), with nothing twice."""
    llm = ScriptedLLM(script)
    runtime = await make_runtime([worker.agent("warm", llm, hibernate_after=0.2)])
    rng = random.Random(7)

    async def answer(sid: str, tcid: str, delay: float) -> str:
        await asyncio.sleep(delay)  # when the answer lands, around the window's end
        return (await runtime.submit_tool_result(sid, tcid, result={"applied": 1})).status

    async def one(delays: tuple[float, float]) -> tuple[Any, list[str]]:
        handle = await runtime.start("warm", "2 edits")
        calls = [c["toolCallId"] for c in await runtime.wait_for_pending(handle.session_id, 2)]
        answers = await asyncio.gather(
            *[answer(handle.session_id, c, d) for c, d in zip(calls, delays, strict=True)]
        )
        assert answers == ["accepted", "accepted"]
        return handle, calls

    delays = [(rng.uniform(0, 0.4), rng.uniform(0, 0.4)) for _ in range(10)]
    turns = await asyncio.gather(*[one(d) for d in delays])
    for handle, calls in turns:
        sid = handle.session_id
        await completed(runtime, handle)
        assert await tool_results(runtime, sid) == calls
        assert await model_rows(runtime, sid) == 2
        first = await workflow_result(handle.workflow_id)
        found = [w.workflow_id for w in await continuations(sid)]
        if first["outcome"] == "hibernated":
            assert found == [names.continuation_workflow_id(sid, handle.run_id)]
        else:
            assert first["outcome"] == "completed" and found == []
    assert llm.calls == 2 * len(turns)


# -- process deaths -------------------------------------------------------------------------------


@pytest.mark.slow
async def test_sigkill_while_hibernated(db_url: str) -> None:
    """Nothing is live to recover: the submits of the new process continue the turn."""
    [turn] = _killed("park", db_url, worker.VERSION, "cold:2 edits", until="parked")
    llm = ScriptedLLM(script)
    async with restarted(worker.settings(db_url), llm) as runtime:
        first: Any
        [first] = await DBOS.list_workflows_async(workflow_ids=[turn["workflow"]])
        assert first.status == "SUCCESS" and first.output["outcome"] == "hibernated"
        await _answer_all(runtime, turn)
        await _assert_once(runtime, turn, hibernated=True)
        assert llm.calls == 1


@pytest.mark.slow
async def test_death_between_the_hibernate_commit_and_the_workflow_end(db_url: str) -> None:
    """The turn's workflow is still PENDING: the new process recovers it, its replay takes the
    recorded hibernate decision (no model call), and a submit continues the turn."""
    turn, state = await _died_at("exit-at-hibernate", worker.EXIT_AT_HIBERNATE, db_url)
    assert state.metadata["hibernated"]["workflowId"] == turn["workflow"]
    turn["calls"] = [p.tool_call_id for p in sorted(state.pending.values(), key=lambda p: p.index)]
    llm = ScriptedLLM(script)
    async with restarted(worker.settings(db_url), llm) as runtime:
        assert (await workflow_result(turn["workflow"]))["outcome"] == "hibernated"
        assert llm.calls == 0
        await _answer_all(runtime, turn)
        await _assert_once(runtime, turn, hibernated=True)
        assert llm.calls == 1


@pytest.mark.slow
async def test_death_between_the_last_submit_and_the_continuation_start(db_url: str) -> None:
    """The last submit committed (the batch due at once) and the process died before it
    started the continuation: the new process's deadline keeper starts it, with no request."""
    turn, state = await _died_at("exit-at-start", worker.EXIT_AT_START, db_url)
    assert state.metadata["hibernated"]["dueAt"] == 0
    assert all(p.submitted_at is not None for p in state.pending.values())
    llm = ScriptedLLM(script)
    with capture_log_events() as logged:
        async with restarted(worker.settings(db_url), llm) as runtime:
            await _assert_once(runtime, turn, hibernated=True)
            assert llm.calls == 1
    started = [e["sessionId"] for e in logged if e["event"] == "turn.continuation_due"]
    assert started == [turn["session"]], "the keeper started it"


@pytest.mark.slow
async def test_sigkill_while_the_continuation_runs(db_url: str) -> None:
    """Killed inside the continuation's model call: the new process (same executor, same
    version) recovers the continuation, which commits nothing twice."""
    [turn] = _killed("kill-in-continuation", db_url, until="continuing")
    llm = ScriptedLLM(script)
    async with restarted(worker.settings(db_url), llm) as runtime:
        await _assert_once(runtime, turn, hibernated=True)
        assert llm.calls == 1  # the step the killed process had begun, and nothing else


@pytest.mark.slow
async def test_restart_with_hibernated_and_hot_turns(db_url: str) -> None:
    """Turns hibernated, turns parked live (``never`` hibernating, and one recorded in the
    previous contract's layout, which never hibernates): after a SIGKILL and a restart, the
    live ones are recovered, and all complete when answered."""
    specs = ["cold:2 edits", "hot:1 edit", "cold:1 edit", "hot:2 edits", "cold@2:1 edit"]
    turns = _killed("park", db_url, worker.VERSION, *specs, until="parked")
    assert [t["agent"] for t in turns] == ["cold", "hot", "cold", "hot", "cold"]
    hibernated = [True, False, True, False, False]
    llm = ScriptedLLM(script)
    async with restarted(worker.settings(db_url), llm) as runtime:
        hot = [t["workflow"] for t, cold in zip(turns, hibernated, strict=True) if not cold]
        recovered = await DBOS.list_workflows_async(workflow_ids=hot)
        assert len(recovered) == 3 and {w.status for w in recovered} <= {"PENDING", "ENQUEUED"}
        for turn in turns:
            await _answer_all(runtime, turn)
        for turn, cold in zip(turns, hibernated, strict=True):
            await _assert_once(runtime, turn, hibernated=cold)
            first = await workflow_result(turn["workflow"])
            assert first["outcome"] == ("hibernated" if cold else "completed")
        assert llm.calls == len(turns)


@pytest.mark.slow
async def test_a_turn_hibernated_by_v1_is_continued_by_v2(db_url: str) -> None:
    """A rolling deploy: v1 hibernates two turns and stops cleanly; v2 (another executor)
    continues one on its submit and the other when its deadline lapses."""
    with reaped(_spawn("park", db_url, "v1", "quick:1 edit", "cold:1 edit")) as v1:
        lapsing, answered = _lines(v1, "parked")
        assert v1.stdin is not None
        v1.stdin.close()
        v1.wait(timeout=BOUND)
    assert v1.returncode == 0
    llm = ScriptedLLM(script)
    settings = worker.settings(db_url, version="v2", executor="deploy-v2")
    async with restarted(settings, llm) as runtime:
        await _answer_all(runtime, answered)
        await _assert_once(runtime, answered, hibernated=True)
        assert (await runtime.wait(lapsing["session"], timeout=BOUND))["status"] == "completed"
        history = await runtime.messages(lapsing["session"])
        assert history[-1].content == "results: client_tool_timeout"
        for turn in (answered, lapsing):
            first: Any
            [first] = await DBOS.list_workflows_async(workflow_ids=[turn["workflow"]])
            [continued] = await continuations(turn["session"])
            assert (first.app_version, continued.app_version) == ("v1", "v2")
            assert continued.executor_id == "deploy-v2"
            outcome = await workflow_result(continued.workflow_id)
            assert outcome["outcome"] == "completed"
        assert llm.calls == 2


async def _died_at(mode: str, code: int, db_url: str) -> tuple[dict[str, Any], SessionState]:
    """Run the worker ``mode``, which exits with ``code`` at its point of death; the turn it
    printed and its session's row as the death left it."""
    with reaped(_spawn(mode, db_url)) as proc:
        out, err = proc.communicate(timeout=BOUND)
    assert proc.returncode == code, err
    [turn] = [json.loads(line) for line in out.splitlines()]
    store = SessionStore.from_url(db_url)
    try:
        return turn, await store.get(turn["session"])
    finally:
        await store.close()
