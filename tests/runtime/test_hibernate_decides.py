"""The hibernate commit decides on the row (ARCHITECTURE.md, rule 22): a batch whose answers
were committed before it is drained live, never hibernated."""

from __future__ import annotations

import pytest

from helix_dbos.llm.scripted import ScriptedLLM
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
