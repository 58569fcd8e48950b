"""The reconciler: a session whose status and workflow disagree is repaired, once.

Each test builds the disagreement a crash would leave (a claim committed with no workflow, a
workflow cancelled behind the runtime's back, a stop recorded but never enforced, a lost
wake-up) and runs one pass with no grace period.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dbos import DBOS

from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime
from helix_dbos.runtime._operations import control
from helix_dbos.runtime._operations import heal as heal_module
from helix_dbos.runtime._operations.heal import heal
from helix_dbos.testing import capture_log_events
from tests.support.asker import asker, claim_without_workflow, parked, script


async def workflow_ended(rt: AgentRuntime, session_id: str) -> None:
    """Wait until DBOS has recorded the end of the session's workflow."""
    workflow_id = (await rt.session(session_id)).workflow_id or ""
    for _ in range(500):
        status = await DBOS.get_workflow_status_async(workflow_id)
        if status is not None and status.status != "PENDING":
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{workflow_id} is still PENDING")


async def test_a_claim_without_its_workflow_is_started(make_runtime: Any) -> None:
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    await claim_without_workflow(rt, "ses_lost", "hello")
    assert (await rt.session("ses_lost")).status == "running"

    with capture_log_events() as logged:
        repairs = await rt.heal(grace_seconds=0)
    assert [(r.session_id, r.action, r.workflow_status) for r in repairs] == [
        ("ses_lost", "started", None)
    ]
    assert (await rt.wait("ses_lost"))["status"] == "completed"
    assert [e["action"] for e in logged if e["event"] == "session.healed"] == ["started"]
    healed = [e.data for e in await rt.events("ses_lost") if e.type == "session_healed"]
    assert healed == [{"action": "started", "workflowStatus": None}]
    await workflow_ended(rt, "ses_lost")
    assert await rt.heal(grace_seconds=0) == []


async def test_two_reconcilers_repair_a_session_once(make_runtime: Any) -> None:
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    for i in range(5):
        await claim_without_workflow(rt, f"ses_lost{i}", "hello")
    first, second = await asyncio.gather(
        heal(rt.ctx, grace_seconds=0), heal(rt.ctx, grace_seconds=0)
    )
    repaired = sorted(r.session_id for r in [*first, *second])
    assert repaired == [f"ses_lost{i}" for i in range(5)]
    for i in range(5):
        assert (await rt.wait(f"ses_lost{i}"))["status"] == "completed"
        assert [m.role for m in await rt.messages(f"ses_lost{i}")] == ["user", "assistant"]


async def test_without_the_agent_a_lost_claim_is_ended_typed(make_runtime: Any) -> None:
    """The CLI has no agents: it ends the session ``failed`` (retryable) instead."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    await claim_without_workflow(rt, "ses_lost", "hello")
    [repair] = await heal(rt.ctx, grace_seconds=0, can_start=False)
    assert repair.action == "ended_lost"
    state = await rt.session("ses_lost")
    assert state.status == "failed"
    assert state.error is not None and state.error["code"] == "framework_turn_lost"
    nxt = await rt.start("asker", "hello", session_id="ses_lost")
    assert (await rt.wait(nxt.session_id))["status"] == "completed"


async def test_a_workflow_cancelled_behind_the_runtime_ends_the_session(
    make_runtime: Any,
) -> None:
    """A parked turn's workflow cancelled directly (not by ``interrupt``): the session ends
    ``interrupted``, its call cleared with a ``stopped`` tombstone."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    sid, [pending] = await parked(rt)
    await DBOS.cancel_workflow_async((await rt.session(sid)).workflow_id or "")

    [repair] = await rt.heal(grace_seconds=0)
    assert (repair.action, repair.workflow_status) == ("ended_cancelled", "CANCELLED")
    state = await rt.session(sid)
    assert state.status == "interrupted" and state.pending == {} and state.ownership == {}
    late = await rt.submit_tool_result(sid, pending["toolCallId"], result={"text": "x"})
    assert late.status == "unknown_tool_call" and late.reason == "run_stopped"


async def test_a_stop_that_never_cancelled_its_workflow_is_finished(
    make_runtime: Any, monkeypatch: Any
) -> None:
    """The stop was recorded, then the process died before cancelling the workflow: the
    reconciler cancels it and wakes its parked coroutine."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    sid, _ = await parked(rt)

    async def crashed(*_args: Any) -> None:
        return None

    monkeypatch.setattr(control, "_enforce_stop", crashed)
    await rt.interrupt(sid)
    workflow_id = (await rt.session(sid)).workflow_id or ""
    assert workflow_id in rt.ctx.parked

    [repair] = await rt.heal(grace_seconds=0)
    assert (repair.session_id, repair.action) == (sid, "cancelled")
    for _ in range(500):
        if workflow_id not in rt.ctx.parked:
            break
        await asyncio.sleep(0.02)
    assert workflow_id not in rt.ctx.parked
    status = await DBOS.get_workflow_status_async(workflow_id)
    assert status is not None and status.status == "CANCELLED"
    assert (await rt.session(sid)).status == "interrupted"


async def test_unenforced_stops_across_pages_are_all_finished_in_one_pass(
    make_runtime: Any, monkeypatch: Any
) -> None:
    """A pass reads the running workflows a page at a time: orphans on every page, and parked
    healthy turns between them, are each judged once in the same pass."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    monkeypatch.setattr(heal_module, "_PAGE", 2)

    async def crashed(*_args: Any) -> None:
        return None

    sessions = [(await parked(rt))[0] for _ in range(5)]
    monkeypatch.setattr(control, "_enforce_stop", crashed)
    stopped = sessions[::2]  # the 1st, 3rd and 5th: on pages 1, 2 and 3
    for sid in stopped:
        await rt.interrupt(sid)

    repairs = await rt.heal(grace_seconds=0)
    assert sorted((r.session_id, r.action) for r in repairs) == sorted(
        (sid, "cancelled") for sid in stopped
    )
    for sid in stopped:
        status = await DBOS.get_workflow_status_async((await rt.session(sid)).workflow_id or "")
        assert status is not None and status.status == "CANCELLED"
    for sid in sessions[1::2]:
        assert (await rt.session(sid)).status == "suspended_client_tool"


async def test_a_lost_wake_up_is_sent_again(make_runtime: Any) -> None:
    """Every wake-up of an answer failed: the stored answer waits for the reconciler, which
    sends the wake-up again, and the turn continues long before its deadline."""
    from tests.runtime.wakeups import answered_with_its_wake_up_lost

    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    sid = await answered_with_its_wake_up_lost(rt)

    [repair] = await rt.heal(grace_seconds=0)
    assert repair.action == "rewoken"
    assert (await rt.wait(sid))["status"] == "completed"
    tools = [m for m in await rt.messages(sid) if m.role == "tool"]
    assert [m.result for m in tools] == [{"text": "blue"}]


async def test_the_background_reconciler_runs_on_its_own(make_runtime: Any) -> None:
    rt = await make_runtime(
        [asker(ScriptedLLM(script))], heal_interval_seconds=0.2, heal_grace_seconds=0
    )
    await claim_without_workflow(rt, "ses_lost", "hello")
    assert (await rt.wait("ses_lost", timeout=30))["status"] == "completed"
