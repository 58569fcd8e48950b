"""Interrupt and abort: a parked turn stops at once, a late submit is refused ``run_stopped``
and stores nothing, and the next message starts a clean turn whose history is valid.

DBOS's ``cancel_workflow`` does not wake a coroutine parked in ``recv``; the stop also sends a
wake on every awaited topic, so the coroutine leaves long before its (300 s) deadline.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dbos import DBOS

from helix_dbos.core.messages import Message
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime, names, records
from helix_dbos.runtime._turn import wake
from helix_dbos.testing import capture_log_events
from tests.runtime.wakeups import lose_answer_wakeups, wake_ups_sent
from tests.support.asker import asker, parked, script
from tests.support.in_flight import InFlight

#: How long a stopped turn may take to leave its ``recv``: far from both what it needs (the
#: stop's wake-up, milliseconds) and the 300 s deadline that would free it without one, so a
#: busy machine never fails the test and a lost wake-up always does.
STOP_BOUND = 60.0


async def gone_within(rt: AgentRuntime, seconds: float) -> float:
    """Seconds until no coroutine is parked; fails if one still is after ``seconds``."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while rt.ctx.parked and loop.time() - started < seconds:
        await asyncio.sleep(0.01)
    assert rt.ctx.parked == set(), f"still parked after {seconds} s: {rt.ctx.parked}"
    return loop.time() - started


def assert_valid_history(history: list[Message]) -> None:
    """Every tool_use has exactly one tool_result, right after its assistant message."""
    results = [m.tool_call_id for m in history if m.role == "tool"]
    assert len(results) == len(set(results)), history
    for i, m in enumerate(history):
        if m.role == "assistant" and m.tool_calls:
            following = history[i + 1 : i + 1 + len(m.tool_calls)]
            assert [f.tool_call_id for f in following] == [c.id for c in m.tool_calls], history


async def test_interrupt_while_parked(make_runtime: Any, monkeypatch: Any) -> None:
    llm = ScriptedLLM(script)
    rt = await make_runtime([asker(llm)])
    in_flight = InFlight(rt, monkeypatch)
    sid, [pending] = await parked(rt)
    tcid = pending["toolCallId"]
    workflow_id = (await rt.session(sid)).workflow_id
    assert workflow_id is not None

    stopped = await rt.interrupt(sid)
    assert stopped.status == "interrupted"
    await gone_within(rt, STOP_BOUND)  # the stop frees it, not the 300 s deadline

    status = await DBOS.get_workflow_status_async(workflow_id)
    assert status is not None and status.status == "CANCELLED"
    state = await rt.session(sid)
    assert state.status == "interrupted" and state.error is None
    assert state.pending == {} and state.ownership == {}
    assert state.completed[tcid].outcome == "stopped"
    view = await rt.status(sid)
    assert view["status"] == "interrupted" and view["pendingToolCalls"] == []
    ends = [e for e in await rt.events(sid) if e.type == "turn_end"]
    assert [e.data["outcome"] for e in ends] == ["interrupted"]

    # A late submit (result or error) is refused run_stopped and stores nothing.
    history = await rt.messages(sid)
    events = await rt.events(sid)
    for late in ({"result": {"text": "blue"}}, {"error": "user closed the tab"}):
        answer = await rt.submit_tool_result(sid, tcid, **late)
        assert answer.status == "unknown_tool_call" and answer.reason == "run_stopped"
        assert answer.continuation is None
    after = await rt.session(sid)
    assert after.version == state.version and after.pending == {}
    assert await rt.messages(sid) == history
    assert len(await rt.events(sid)) == len(events)
    # Once the stopped turn's body has returned (and nothing it started runs), a model call
    # that continued it would have been made.
    await in_flight.settled()
    assert llm.calls == 1, "nothing continued the stopped turn"

    # The next message is a clean turn: the unanswered call is closed as not executed.
    handle = await rt.start("asker", "thanks", session_id=sid)
    assert handle.run_id != state.run_id
    assert (await rt.wait(sid))["status"] == "completed"
    history = await rt.messages(sid)
    assert [m.role for m in history] == ["user", "assistant", "tool", "user", "assistant"]
    assert_valid_history(history)
    healed = history[2]
    assert healed.tool_call_id == tcid and healed.is_error
    assert healed.error_code == "not_executed"
    seen = llm.requests[-1].messages
    assert [m.role for m in seen] == ["user", "assistant", "tool", "user"]
    assert seen[2].error_code == "not_executed" and seen[3].content == "thanks"
    assert llm.calls == 2

    # Stopping a session that has ended changes nothing.
    ended = await rt.session(sid)
    events = await rt.events(sid)
    for stop in (rt.interrupt, rt.abort):
        unchanged = await stop(sid)
        assert unchanged.status == "completed" and unchanged.version == ended.version
    assert len(await rt.events(sid)) == len(events)


async def test_next_message_through_resume_after_interrupting_a_batch(make_runtime: Any) -> None:
    """Two calls, one already answered when the stop lands: the stop wins over the stored
    answer, and ``resume(with_message)`` starts the next turn with both calls closed."""
    llm = ScriptedLLM(script)
    rt = await make_runtime([asker(llm)])
    sid, pending = await parked(rt, "ask twice", count=2)
    first, second = (p["toolCallId"] for p in pending)
    answer = await rt.submit_tool_result(sid, first, result={"text": "blue"})
    assert answer.continuation is not None and answer.continuation.kind == "awaiting_batch"

    await rt.interrupt(sid)
    await gone_within(rt, STOP_BOUND)
    state = await rt.session(sid)
    assert state.pending == {} and state.ownership == {}
    assert {state.completed[t].outcome for t in (first, second)} == {"stopped"}
    again = await rt.submit_tool_result(sid, first, result={"text": "blue"})
    assert again.status == "unknown_tool_call" and again.reason == "run_stopped"

    handle = await rt.resume(sid, "with_message", "start over")
    assert handle.run_id != state.run_id
    assert (await rt.wait(sid))["status"] == "completed"
    history = await rt.messages(sid)
    assert_valid_history(history)
    assert [(m.tool_call_id, m.error_code) for m in history if m.role == "tool"] == [
        (first, "not_executed"),
        (second, "not_executed"),
    ]
    seen = llm.requests[-1].messages
    assert [m.role for m in seen] == ["user", "assistant", "tool", "tool", "user"]
    assert seen[-1].content == "start over"


async def test_abort_fails_the_session_framework_cancelled(make_runtime: Any) -> None:
    llm = ScriptedLLM(script)
    rt = await make_runtime([asker(llm)])
    sid, [pending] = await parked(rt)
    workflow_id = (await rt.session(sid)).workflow_id
    assert workflow_id is not None

    aborted = await rt.abort(sid, "operator pulled the plug")
    assert aborted.status == "failed"
    await gone_within(rt, STOP_BOUND)
    status = await DBOS.get_workflow_status_async(workflow_id)
    assert status is not None and status.status == "CANCELLED"
    state = await rt.session(sid)
    assert state.status == "failed"
    assert state.error == {"code": "framework_cancelled", "message": "operator pulled the plug"}
    assert state.pending == {} and state.ownership == {}
    view = await rt.status(sid)
    assert view["status"] == "failed" and view["error"]["code"] == "framework_cancelled"
    end = [e for e in await rt.events(sid) if e.type == "turn_end"][-1]
    assert end.data["outcome"] == "failed" and end.data["error"]["code"] == "framework_cancelled"

    late = await rt.submit_tool_result(sid, pending["toolCallId"], result={"text": "blue"})
    assert late.status == "unknown_tool_call" and late.reason == "run_stopped"
    assert llm.calls == 1

    # An abort without a reason still says why; a stopped session is stopped once.
    sid2, _ = await parked(rt)
    await rt.abort(sid2)
    state2 = await rt.session(sid2)
    assert state2.error is not None and state2.error["code"] == "framework_cancelled"
    assert state2.error["message"]
    again = await rt.interrupt(sid2)
    assert again.status == "failed" and again.version == state2.version

    # The next message starts a clean turn on the failed session.
    await rt.start("asker", "hello again", session_id=sid)
    assert (await rt.wait(sid))["status"] == "completed"
    assert (await rt.session(sid)).error is None
    assert_valid_history(await rt.messages(sid))


async def test_interrupt_wakes_a_turn_parked_on_an_answer_whose_wake_was_lost(
    make_runtime: Any, monkeypatch: Any
) -> None:
    """The answer is stored but its ``send`` failed (logged, not raised): the turn still waits
    on that call's topic. The stop must wake it too, not only the unanswered calls."""
    llm = ScriptedLLM(script)
    rt = await make_runtime([asker(llm)])
    sid, [pending] = await parked(rt)
    lose_answer_wakeups(rt, monkeypatch)
    with capture_log_events() as logged:
        answer = await rt.submit_tool_result(sid, pending["toolCallId"], result={"text": "blue"})
    assert answer.status == "accepted"
    # Both the send enlisted in the answer's transaction and the send after the commit failed.
    assert [e["event"] for e in logged if e["event"] == "client_tool.send_event_failed"] == [
        "client_tool.send_event_failed"
    ] * 2
    # The submit has returned, both its wake-ups failed: none is queued for the turn (a
    # ``recv`` wakes only on a queued message, or on an in-process signal sent after one), so
    # nothing can wake it and it still waits on the call's topic.
    workflow_id = (await rt.session(sid)).workflow_id or ""
    topic = names.tool_result_topic(pending["toolCallId"])
    assert await wake_ups_sent(rt, workflow_id, topic) == 0
    assert wake.local_waiter(workflow_id, topic) is not None
    assert rt.ctx.parked == {workflow_id}, "without its wake-up the turn still waits"

    await rt.interrupt(sid)
    await gone_within(rt, STOP_BOUND)
    assert (await rt.session(sid)).status == "interrupted"
    assert llm.calls == 1


async def test_a_stop_pops_the_stash(make_runtime: Any) -> None:
    """A new message stashed over a parked batch never outlives a stop: the next turn of the
    session must not find (and deliver) it."""
    llm = ScriptedLLM(script)
    rt = await make_runtime([asker(llm)])
    sid, _ = await parked(rt)

    def stash(states: dict[str, Any]) -> None:
        # What resume(with_message) leaves before the parked turn drains it.
        states[sid].metadata[records.STASH_KEY] = {
            "message": "late",
            "abandonPending": False,
            "runId": states[sid].run_id,
        }

    await rt.store.update([sid], stash)
    assert records.STASH_KEY in (await rt.session(sid)).metadata
    stopped = await rt.interrupt(sid)
    assert stopped.status == "interrupted"
    assert records.STASH_KEY not in (await rt.session(sid)).metadata
