"""What the reconciler records and sends when it ends a session (``heal._claim``, ``_end``,
``_cancel_orphan``): a workflow cancelled behind the runtime ends the session ``interrupted``
with no error, as a stop would; a lost workflow ends it ``failed`` with the typed, retryable
``framework_turn_lost``. The session's row and its ``turn_end`` event say the same, and the
repair is recorded on the row and as a ``session_healed`` event. Ending a persistent session
releases its workflow's mark; finishing an unenforced stop sends each call's stop to the turn
that owns the call. A sub-agent without its workflow is its parent's turn's to start while
that turn is active, and ended lost once it is not. A hibernated turn whose continuation
already runs is not continued again. A session written within the grace period is not judged, whatever the host's time zone. A
session left active behind a workflow that has ended is ended lost. A persistent session
waiting between turns is passed over, and the orphans after it on the page are still
cancelled. A page whose orphans were all cancelled moves the next page back by as many, so
the orphan that then heads the list is not skipped. A session whose turn completed, its
workflow ended, is left alone. Each repair reports the session, the workflow and the
status it was judged on.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOS

from helix_dbos.core.session import SessionState
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime, records
from helix_dbos.runtime._operations import control
from helix_dbos.runtime._operations import heal as heal_module
from helix_dbos.runtime._operations.heal import Repair, heal
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import (
    agent,
    cold_turn,
    completed,
    continuations,
    hold_continuation_record,
)
from tests.runtime.persistent_agents import keeper_agent
from tests.runtime.turn_messages import messages_to, stops
from tests.runtime.wakeups import answered_with_its_wake_up_lost
from tests.support.agent_tree import tree
from tests.support.asker import asker, claim_without_workflow, parked, script

LOST: dict[str, Any] = {
    "code": "framework_turn_lost",
    "message": "The turn's workflow was lost; the session was ended.",
    "retryable": True,
}


async def _events(rt: AgentRuntime, session_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in await rt.events(session_id) if e.type == kind]


def _assert_heal_record(metadata: dict[str, Any], healed: dict[str, Any]) -> None:
    """The repair recorded on the session's row: what was done, on which workflow status,
    and when (the reconciler's clock, in epoch milliseconds)."""
    record = metadata["heal"]
    assert isinstance(record.get("at"), int) and record["at"] > 0
    assert record == {**healed, "at": record["at"]}


async def test_a_session_whose_workflow_was_cancelled_ends_interrupted_without_an_error(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    sid, _ = await parked(rt)
    await DBOS.cancel_workflow_async((await rt.session(sid)).workflow_id or "")

    [repair] = await rt.heal(grace_seconds=0)
    assert (repair.action, repair.workflow_status) == ("ended_cancelled", "CANCELLED")
    state = await rt.session(sid)
    assert (state.status, state.error) == ("interrupted", None)
    assert await _events(rt, sid, "turn_end") == [{"outcome": "interrupted"}]
    healed = {"action": "ended_cancelled", "workflowStatus": "CANCELLED"}
    assert await _events(rt, sid, "session_healed") == [healed]
    _assert_heal_record(state.metadata, healed)


async def test_a_lost_turn_ends_failed_with_a_retryable_typed_error(
    make_runtime: MakeRuntime,
) -> None:
    """A claim committed with no workflow, judged where the agent cannot be started."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    await claim_without_workflow(rt, "ses_lost", "hello")

    [repair] = await heal(rt.ctx, grace_seconds=0, can_start=False)
    assert (repair.action, repair.workflow_status) == ("ended_lost", None)
    state = await rt.session("ses_lost")
    assert (state.status, state.error) == ("failed", LOST)
    assert await _events(rt, "ses_lost", "turn_end") == [{"outcome": "failed", "error": LOST}]
    healed = {"action": "ended_lost", "workflowStatus": None}
    assert await _events(rt, "ses_lost", "session_healed") == [healed]
    _assert_heal_record(state.metadata, healed)


async def test_ending_a_persistent_session_releases_its_workflows_mark(
    make_runtime: MakeRuntime,
) -> None:
    """A persistent session's workflow cancelled behind the runtime mid-turn: the session the
    reconciler ends no longer marks that workflow, and the next message starts a new one."""
    rt = await make_runtime([keeper_agent()], heal_interval_seconds=0)
    first = await rt.start("keeper", "1 edit")
    sid = first.session_id
    await rt.wait_for_pending(sid)
    assert records.marks((await rt.session(sid)).metadata, first.workflow_id)
    await DBOS.cancel_workflow_async(first.workflow_id or "")

    [repair] = await rt.heal(grace_seconds=0)
    assert (repair.session_id, repair.action) == (sid, "ended_cancelled")
    assert records.PERSISTENT_KEY not in (await rt.session(sid)).metadata
    nxt = await rt.start("keeper", "back", session_id=sid)
    assert nxt.delivery == "started" and nxt.workflow_id != first.workflow_id
    assert (await rt.wait(sid))["status"] == "completed"


async def test_an_unenforced_stop_of_a_tree_is_finished_with_each_calls_own_stop(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop of a tree recorded, then the process died before it cancelled the workflows
    (``_enforce_stop`` never ran): the reconciler cancels each, and sends the stop of each
    call to the turn that owns it. The grandchild's call is tombstoned on the root's row: the
    reconciler finds it there, and sends it to the grandchild's workflow alone."""

    async def crashed(*_args: Any) -> None:
        return None

    root_agent, _ = tree()
    rt = await make_runtime([root_agent], heal_interval_seconds=0)
    handle = await rt.start("root", "go")
    [call] = await rt.wait_for_pending(handle.session_id)
    below = await rt.store.descendants(handle.session_id)
    sessions = [await rt.session(handle.session_id), *below]
    [grandchild] = [s for s in below if s.session_id == call["ownerSessionId"]]
    monkeypatch.setattr(control, "_enforce_stop", crashed)
    await rt.interrupt(handle.session_id)

    repairs = await rt.heal(grace_seconds=0)
    assert sorted((r.session_id, r.action) for r in repairs) == sorted(
        (s.session_id, "cancelled") for s in sessions
    )
    for s in sessions:
        sent = await messages_to(rt, s.workflow_id or "")
        if s is grandchild:
            assert sent == stops(s.workflow_id or "", s.run_id or "", [call["toolCallId"]])
        else:
            assert sent == [], s.session_id


async def test_a_resent_wake_up_is_reported_on_the_running_workflow(
    make_runtime: MakeRuntime,
) -> None:
    """An answer whose wake-up was lost: the repair names the session, its workflow and the
    status it was judged on (``PENDING``), and the turn goes on."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    sid = await answered_with_its_wake_up_lost(rt)
    workflow_id = (await rt.session(sid)).workflow_id

    assert await rt.heal(grace_seconds=0) == [Repair(sid, workflow_id, "PENDING", "rewoken")]
    assert (await rt.wait(sid))["status"] == "completed"


async def test_a_started_turn_is_reported_under_its_recorded_workflow(
    make_runtime: MakeRuntime,
) -> None:
    """A claim committed with no workflow is started under the id the claim recorded, and the
    repair says so (no workflow status: there was none)."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    await claim_without_workflow(rt, "ses_lost", "hello")
    workflow_id = (await rt.session("ses_lost")).workflow_id

    assert await rt.heal(grace_seconds=0) == [Repair("ses_lost", workflow_id, None, "started")]
    assert (await rt.wait("ses_lost"))["status"] == "completed"


async def test_a_sub_agent_without_its_workflow_is_left_to_its_active_parent(
    make_runtime: MakeRuntime,
) -> None:
    """A sub-agent's row names a workflow DBOS does not have (its parent's step committed the
    row and the process died before the start): while the parent's turn is active, the
    parent's turn (or its recovery) starts it, so the reconciler leaves it. Once the parent
    has ended, the sub-agent is ended lost: nothing would start it any more."""
    root_agent, _ = tree()
    rt = await make_runtime([root_agent], heal_interval_seconds=0)
    handle = await rt.start("root", "go")
    root_id = handle.session_id
    await rt.wait_for_pending(root_id)
    [child] = [s for s in await rt.store.descendants(root_id) if s.parent_session_id == root_id]

    def lose_workflow(states: dict[str, SessionState]) -> None:
        states[child.session_id].workflow_id = "wf_never_started"

    await rt.store.update([child.session_id], lose_workflow)
    before = await rt.session(child.session_id)
    assert await rt.heal(grace_seconds=0) == []
    after = await rt.session(child.session_id)
    assert (after.status, after.version) == (before.status, before.version)

    # The parent's workflow cancelled behind the runtime: the parent ends, then its child.
    await DBOS.cancel_workflow_async((await rt.session(root_id)).workflow_id or "")
    repairs = await rt.heal(grace_seconds=0)
    if len(repairs) == 1:  # the child was judged before its parent ended: the next pass
        repairs += await rt.heal(grace_seconds=0)
    assert sorted((r.session_id, r.action, r.workflow_status) for r in repairs) == sorted(
        [(root_id, "ended_cancelled", "CANCELLED"), (child.session_id, "ended_lost", None)]
    )
    assert (await rt.session(child.session_id)).status == "failed"


async def test_a_hibernated_turn_whose_continuation_runs_is_not_continued_again(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hibernated turn's batch is complete and its continuation started, held before its
    results commit (the mark is still on the row): the reconciler finds the continuation's
    workflow and neither starts nor reports it again."""
    reached, gate = hold_continuation_record(monkeypatch)
    rt = await make_runtime([agent("cold")], deadline_keeper_seconds=0, heal_interval_seconds=0)
    handle, (tcid,) = await cold_turn(rt, "1 edit")
    sid = handle.session_id
    await rt.submit_tool_result(sid, tcid, result={"applied": 1})
    await asyncio.wait_for(reached.wait(), 60)
    assert "hibernated" in (await rt.store.get(sid)).metadata

    repairs = await rt.heal(grace_seconds=0)
    gate.set()
    assert [r for r in repairs if r.session_id == sid] == []
    await completed(rt, handle)
    assert len(await continuations(sid)) == 1


async def test_a_session_written_within_the_grace_period_is_not_judged(
    make_runtime: MakeRuntime,
) -> None:
    """A claim committed a moment ago with no workflow yet may be a start in flight: a pass
    with a grace period longer than its age leaves it; one without a grace period starts it."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    await claim_without_workflow(rt, "ses_new", "hello", "run_new00000000000000000")
    before = await rt.session("ses_new")

    assert await heal(rt.ctx, grace_seconds=3600) == []
    assert (await rt.session("ses_new")).version == before.version
    [repair] = await heal(rt.ctx, grace_seconds=0)
    assert (repair.session_id, repair.action) == ("ses_new", "started")
    assert (await rt.wait("ses_new"))["status"] == "completed"


async def test_a_session_left_active_behind_an_ended_workflow_is_ended_lost(
    make_runtime: MakeRuntime,
) -> None:
    """The turn's workflow has ended (``SUCCESS``) but the session still says it runs (its end
    was never recorded): nothing will move it, so it is ended ``failed`` with the typed
    ``framework_turn_lost``, and the repair names the workflow and the status it was judged on."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    handle = await rt.start("asker", "hello")
    sid = handle.session_id
    assert (await rt.wait(sid))["status"] == "completed"
    workflow_id = (await rt.session(sid)).workflow_id
    status = await DBOS.get_workflow_status_async(workflow_id or "")
    assert status is not None and status.status == "SUCCESS"

    def still_running(states: dict[str, SessionState]) -> None:
        states[sid].status = "running"

    await rt.store.update([sid], still_running)
    assert await rt.heal(grace_seconds=0) == [Repair(sid, workflow_id, "SUCCESS", "ended_lost")]
    state = await rt.session(sid)
    assert (state.status, state.error) == ("failed", LOST)
    assert (await _events(rt, sid, "turn_end"))[-1] == {"outcome": "failed", "error": LOST}
    healed = {"action": "ended_lost", "workflowStatus": "SUCCESS"}
    assert await _events(rt, sid, "session_healed") == [healed]
    _assert_heal_record(state.metadata, healed)


async def test_an_answer_younger_than_the_grace_is_not_woken_again_on_a_row_that_looks_older(
    make_runtime: MakeRuntime,
) -> None:
    """The pass judges rows last written before its grace, by the row's ``updated_at``; on
    Postgres that is the database's clock, and an answer's ``submittedAt`` this process's. A
    database clock behind the process's makes a row just answered look old: the answer's own
    age still holds its wake-up back for the grace (``_rewake``), as its turn may be taking
    it. Once the answer is older than the grace, the wake-up is sent again."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    sid = await answered_with_its_wake_up_lost(rt)
    # As if the database's clock ran ten minutes behind this process's.
    backdate = sa.text("UPDATE __agents_states SET updated_at = :at WHERE session_id = :sid")
    at = datetime.now(UTC) - timedelta(minutes=10)
    async with rt.store.engine.begin() as conn:
        await conn.execute(
            backdate.bindparams(sa.bindparam("at", at, type_=sa.DateTime(True))), {"sid": sid}
        )
    assert await rt.heal(grace_seconds=60) == []
    [repair] = await rt.heal(grace_seconds=0)
    assert (repair.session_id, repair.action) == (sid, "rewoken")
    assert (await rt.wait(sid))["status"] == "completed"


@pytest.mark.usefixtures("tokyo")
async def test_the_grace_period_is_measured_in_utc_on_a_host_not_set_to_utc(
    make_runtime: MakeRuntime,
) -> None:
    """The process in Tokyo's time zone (UTC+9): a claim committed a moment ago is still within
    a grace period of an hour. A cutoff taken in local time would be nine hours late, and the
    pass would judge (and start) it."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    await claim_without_workflow(rt, "ses_new", "hello", "run_new00000000000000000")
    before = await rt.session("ses_new")

    assert await heal(rt.ctx, grace_seconds=3600) == []
    assert (await rt.session("ses_new")).version == before.version


async def test_a_persistent_session_between_turns_does_not_end_the_pass_over_its_page(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A persistent session waiting between turns (its workflow PENDING, marked as its live
    one), then a stop whose process died before it cancelled the workflow: the page of running
    workflows holds both, the idle session first (written first). The reconciler leaves the
    idle workflow running, and goes on to cancel the stopped one."""

    async def crashed(*_args: Any) -> None:
        return None

    rt = await make_runtime([keeper_agent(), asker(ScriptedLLM(script))], heal_interval_seconds=0)
    idle = await rt.start("keeper", "hi")
    await rt.wait(idle.session_id)
    sid, _ = await parked(rt)
    monkeypatch.setattr(control, "_enforce_stop", crashed)
    await rt.interrupt(sid)
    stopped = (await rt.session(sid)).workflow_id or ""

    repairs = await rt.heal(grace_seconds=0)
    assert [(r.session_id, r.workflow_id, r.action) for r in repairs] == [
        (sid, stopped, "cancelled")
    ]
    for workflow_id, status in ((idle.workflow_id, "PENDING"), (stopped, "CANCELLED")):
        found = await DBOS.get_workflow_status_async(workflow_id or "")
        assert found is not None and found.status == status


async def test_a_page_of_cancelled_orphans_does_not_skip_the_next_one(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of two: the first page holds two orphans, both cancelled, so they leave the list
    of running workflows and the third orphan heads it. The next page starts where the first
    did, and the third is cancelled in the same pass; the healthy turn after it is left."""

    async def crashed(*_args: Any) -> None:
        return None

    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    monkeypatch.setattr(heal_module, "_PAGE", 2)
    sessions = [(await parked(rt))[0] for _ in range(4)]
    monkeypatch.setattr(control, "_enforce_stop", crashed)
    stopped = sessions[:3]
    for sid in stopped:
        await rt.interrupt(sid)

    repairs = await rt.heal(grace_seconds=0)
    assert sorted((r.session_id, r.action) for r in repairs) == sorted(
        (sid, "cancelled") for sid in stopped
    )
    assert (await rt.session(sessions[3])).status == "suspended_client_tool"


async def test_a_completed_session_and_its_ended_workflow_are_left_alone(
    make_runtime: MakeRuntime,
) -> None:
    """A turn that completed: its session has ended and so has its workflow (``SUCCESS``).
    Nothing disagrees, and a pass (which looks for ended sessions among the running
    workflows only, here a healthy parked turn's) makes no repair."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    handle = await rt.start("asker", "hello")
    assert (await rt.wait(handle.session_id))["status"] == "completed"
    before = await rt.session(handle.session_id)
    await parked(rt)

    assert await rt.heal(grace_seconds=0) == []
    assert (await rt.session(handle.session_id)).version == before.version


async def test_a_pass_reaches_an_orphan_behind_pages_of_healthy_turns(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of two: four healthy parked turns fill the first two pages, and the orphan is on
    the third. Each page moves the next one on by a page, so the pass reaches the third page,
    cancels the orphan and ends (a pass that read one page again would never end)."""

    async def crashed(*_args: Any) -> None:
        return None

    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    monkeypatch.setattr(heal_module, "_PAGE", 2)
    sessions = [(await parked(rt))[0] for _ in range(5)]
    monkeypatch.setattr(control, "_enforce_stop", crashed)
    await rt.interrupt(sessions[4])

    repairs = await rt.heal(grace_seconds=0)
    assert [(r.session_id, r.action) for r in repairs] == [(sessions[4], "cancelled")]
