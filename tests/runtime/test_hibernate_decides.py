"""The hibernate commit decides on the row (ARCHITECTURE.md, rule 22): a batch whose answers
were committed before it is drained live, never hibernated."""

from __future__ import annotations

from typing import Any

import pytest
from dbos import DBOS

from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime._turn import hibernation
from tests.runtime import hibernation_worker as worker
from tests.runtime.conftest import MakeRuntime
from tests.runtime.wakeups import lose_answer_wakeups


async def test_a_batch_answered_before_the_hibernate_commit_is_drained_live(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both answers are stored while the turn is parked, but their wake-ups are lost: when its
    hot window ends, the hibernate commit finds the batch complete on the row and the turn
    goes on live, in its own workflow (no hibernation, no continuation)."""
    llm = ScriptedLLM(worker.script)
    rt = await make_runtime(
        [worker.agent("warm", llm, hibernate_after=1.0)], heal_interval_seconds=0
    )
    lose_answer_wakeups(rt, monkeypatch)
    handle = await rt.start("warm", "2 edits")
    sid = handle.session_id
    calls = [c["toolCallId"] for c in await rt.wait_for_pending(sid, 2)]
    for call in calls:
        answer = await rt.submit_tool_result(sid, call, result={"applied": 1})
        assert answer.status == "accepted"
    await worker.completed(rt, handle)
    assert (await worker.workflow_result(handle.workflow_id))["outcome"] == "completed"
    assert await worker.continuations(sid) == []
    assert await worker.tool_results(rt, sid) == calls


async def test_a_batch_a_new_message_abandoned_before_the_hibernate_commit_is_drained_live(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new message abandons the parked batch, but its wake-ups are lost (it lands as the hot
    window ends): the hibernate commit finds it stashed on the row and the turn drains the
    batch live, abandoning the unanswered call. Hibernating instead would leave the session
    ``suspended_client_tool`` until its calls' deadline (300 s; the keeper is off)."""
    llm = ScriptedLLM(worker.script)
    rt = await make_runtime(
        [worker.agent("warm", llm, hibernate_after=1.0)],
        heal_interval_seconds=0,
        deadline_keeper_seconds=0,
    )
    real_send = DBOS.send_async

    async def losing_abandon(
        destination_id: str, message: Any, topic: Any = None, **kw: Any
    ) -> None:
        if isinstance(message, dict) and message.get("kind") == "abandon":
            return  # the control message is lost; the stash is on the row
        await real_send(destination_id, message, topic, **kw)

    monkeypatch.setattr(DBOS, "send_async", losing_abandon)
    handle = await rt.start("warm", "2 edits")
    sid = handle.session_id
    answered, abandoned = [c["toolCallId"] for c in await rt.wait_for_pending(sid, 2)]
    lose_answer_wakeups(rt, monkeypatch)
    assert (await rt.submit_tool_result(sid, answered, result={"applied": 1})).status == "accepted"
    await rt.resume(sid, "with_message", "never mind, do Y instead", abandon_pending=True)
    view = await rt.wait(sid, timeout=20)
    assert view["status"] == "completed", view
    assert await worker.continuations(sid) == []
    by_id = {m.tool_call_id: m for m in await rt.messages(sid) if m.role == "tool"}
    assert by_id[answered].result == {"applied": 1}
    assert by_id[abandoned].error_code == "client_tool_abandoned"


async def test_at_once_a_batch_answered_before_the_hibernate_commit_parks_without_waiting(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hot window of 0: the hibernate commit comes before any park. Both answers land (with
    their wake-ups) before it: it finds the batch complete on the row, and the turn parks
    without waiting, takes both wake-ups (DBOS records each ``recv``, as the park records them
    when it comes first) and goes on live in its own workflow, with no continuation."""
    llm = ScriptedLLM(worker.script)
    rt = await make_runtime([worker.agent("cold", llm, hibernate_after=0)])
    real_hibernate = hibernation.hibernate
    answered: list[str] = []

    async def answered_first(session_id: str, run_id: str, *args: Any, **kw: Any) -> Any:
        state = await rt.session(session_id)
        for call in state.pending:
            answer = await rt.submit_tool_result(session_id, call, result={"applied": 1})
            assert answer.status == "accepted" and answer.owner_workflow_id is not None
            answered.append(call)
        return await real_hibernate(session_id, run_id, *args, **kw)

    monkeypatch.setattr(hibernation, "hibernate", answered_first)
    handle = await rt.start("cold", "2 edits")
    await worker.completed(rt, handle)
    assert (await worker.workflow_result(handle.workflow_id))["outcome"] == "completed"
    assert await worker.continuations(handle.session_id) == []
    assert sorted(map(str, await worker.tool_results(rt, handle.session_id))) == sorted(answered)
    steps = await DBOS.list_workflow_steps_async(handle.workflow_id or "")
    received = [s["output"] or {} for s in steps if s["function_name"] == "DBOS.recv"]
    assert sorted(str(m.get("toolCallId")) for m in received) == sorted(answered), steps
