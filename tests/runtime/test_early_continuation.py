"""A submit that completes the batch of a turn parked in its process continues the turn
itself (``batch_job``): it runs the batch's job (the turn's results commit, then its next
model step) while DBOS is still handing the turn its wake-up. The turn joins that job, so each
runs once; it calls the model only if the turn goes on; and a turn recovered in another process
finds both recorded. Postgres only: on SQLite, which takes one writer at a time, the turn
does that work itself once woken."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dbos import DBOS

from helix_dbos.config import HelixSettings
from helix_dbos.core import define_agent, define_tool
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime
from tests.runtime.agents import EditIn, EditOut, batch_script, editor_agent
from tests.runtime.conftest import MakeRuntime


async def _status_within(runtime: AgentRuntime, session_id: str, want: str, seconds: float) -> str:
    """The session's status once it is ``want``, or as it is after ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        status = str((await runtime.status(session_id))["status"])
        if status == want or loop.time() > deadline:
            return status
        await asyncio.sleep(0.01)


def _hold_wake_ups(
    runtime: AgentRuntime, monkeypatch: pytest.MonkeyPatch, want: str, seconds: float
) -> tuple[list[str], list[str]]:
    """Hold each wake-up DBOS hands a turn until its session is ``want`` (at most
    ``seconds``). Returns the statuses seen then, and a list to put the session id in."""
    real = DBOS.recv_async
    seen: list[str] = []
    session: list[str] = []

    async def held(topic: str | None, timeout_seconds: float = 60) -> Any:
        message = await real(topic, timeout_seconds=timeout_seconds)
        seen.append(await _status_within(runtime, session[0], want, seconds))
        return message

    monkeypatch.setattr(DBOS, "recv_async", held)
    return seen, session


@pytest.mark.postgres_only
async def test_the_submit_commits_the_results_and_runs_the_next_step_before_the_turn_wakes(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DBOS's wake-up of the turn is held until the session has completed: the submit that
    completed the batch committed its results and ran the final model step meanwhile. Before,
    only the woken turn did that, and the held wake-up timed out with the session still
    parked. The model is called once per step, and the conversation is whole."""
    llm = ScriptedLLM(batch_script)
    runtime = _runtime(pg_url, llm)
    await runtime.launch()
    try:
        await _submit_both_while_the_wake_up_is_held(runtime, llm, monkeypatch)
    finally:
        await runtime.shutdown()


async def _submit_both_while_the_wake_up_is_held(
    runtime: AgentRuntime, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen, session = _hold_wake_ups(runtime, monkeypatch, "completed", 10)
    handle = await runtime.start("editor", "2 edits")
    session.append(handle.session_id)
    first, second = await runtime.wait_for_pending(handle.session_id, 2)
    for call in (first, second):  # the second completes the batch
        answer = await runtime.submit_tool_result(
            handle.session_id, call["toolCallId"], result={"applied": 1}
        )
        assert answer.status == "accepted"
    outcome = await handle.result()
    assert outcome["outcome"] == "completed"
    assert seen[-1] == "completed"
    assert llm.calls == 2
    history = await runtime.messages(handle.session_id)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [m.tool_call_id for m in history if m.role == "tool"] == [
        first["toolCallId"],
        second["toolCallId"],
    ]
    events = await runtime.events(handle.session_id, 0)
    assert len([e for e in events if e.type == "tool_end"]) == 2
    assert len([e for e in events if e.type == "turn_end"]) == 1


async def test_no_model_call_for_a_turn_that_ends_with_its_results(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn with no model step left (``max_steps``) ends failed after its results: the
    submit that commits them does not call the model for it either."""
    llm = ScriptedLLM(batch_script)
    agent = define_agent(
        "editor",
        llm=llm,
        tools=[define_tool("edit", "Apply an edit", EditIn, EditOut, execute="client")],
        max_steps=1,
    )
    runtime = await make_runtime([agent])
    seen, session = _hold_wake_ups(runtime, monkeypatch, "failed", 1)
    handle = await runtime.start("editor", "1 edit")
    session.append(handle.session_id)
    [call] = await runtime.wait_for_pending(handle.session_id)
    await runtime.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
    outcome = await handle.result()
    assert outcome["outcome"] == "failed"
    assert outcome["error"]["code"] == "max_steps_exceeded"
    assert llm.calls == 1
    history = await runtime.messages(handle.session_id)
    assert [m.role for m in history] == ["user", "assistant", "tool"]


def _runtime(db_url: str, llm: ScriptedLLM) -> AgentRuntime:
    settings = HelixSettings(database_url=db_url, executor_id="exec", application_version="t")
    return AgentRuntime([editor_agent(llm=llm)], settings)


@pytest.mark.postgres_only
def test_a_turn_recovered_elsewhere_finds_what_the_submit_committed(pg_url: str) -> None:
    """The process stops after the submit committed the results and the final answer, before
    DBOS handed the turn its wake-up. The next process of the executor recovers the turn: it
    finds both commits recorded, calls no model, and writes nothing twice."""
    llm = ScriptedLLM(batch_script)
    # Each runtime in an event loop of its own, as in a process of its own.
    session_id = asyncio.run(_answer_then_stop_before_the_wake_up(pg_url, llm))
    assert llm.calls == 2
    asyncio.run(_recover(pg_url, llm, session_id))
    assert llm.calls == 2


async def _answer_then_stop_before_the_wake_up(db_url: str, llm: ScriptedLLM) -> str:
    first = _runtime(db_url, llm)
    await first.launch()
    real = DBOS.recv_async
    stopped = asyncio.Event()

    async def never(topic: str | None, timeout_seconds: float = 60) -> Any:
        if first.ctx.parked:  # the park, not a recovered replay
            await stopped.wait()  # never set: the wake-up is never consumed here
        return await real(topic, timeout_seconds=timeout_seconds)

    DBOS.recv_async = never  # type: ignore[method-assign,assignment]
    try:
        handle = await first.start("editor", "1 edit")
        [call] = await first.wait_for_pending(handle.session_id)
        await first.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
        assert await _status_within(first, handle.session_id, "completed", 10) == "completed"
        task = handle.workflow.task
        await first.shutdown()
        assert task.cancelled()  # PENDING in DBOS: nothing recorded its end
        return handle.session_id
    finally:
        DBOS.recv_async = real  # type: ignore[method-assign]


async def _recover(db_url: str, llm: ScriptedLLM, session_id: str) -> None:
    second = _runtime(db_url, llm)
    await second.launch()
    try:
        workflow_id = (await second.session(session_id)).workflow_id or ""
        handle: Any = await DBOS.retrieve_workflow_async(workflow_id)
        outcome = await asyncio.wait_for(handle.get_result(), 60)
        assert outcome["outcome"] == "completed"
        history = await second.messages(session_id)
        assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
        events = await second.events(session_id, 0)
        assert len([e for e in events if e.type == "tool_end"]) == 1
        assert len([e for e in events if e.type == "turn_end"]) == 1
    finally:
        await second.shutdown()
