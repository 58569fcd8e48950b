"""What the reconciler records and sends when it ends a session (``heal._claim``, ``_end``,
``_cancel_orphan``): a workflow cancelled behind the runtime ends the session ``interrupted``
with no error, as a stop would; a lost workflow ends it ``failed`` with the typed, retryable
``framework_turn_lost``. The session's row and its ``turn_end`` event say the same, and the
repair is recorded on the row and as a ``session_healed`` event. Ending a persistent session
releases its workflow's mark; finishing an unenforced stop sends each call's stop to the turn
that owns the call.
"""

from __future__ import annotations

from typing import Any

import pytest
from dbos import DBOS

from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime, records
from helix_dbos.runtime._commits.opening import open_turn
from helix_dbos.runtime._operations import control
from helix_dbos.runtime._operations.heal import heal
from tests.runtime.conftest import MakeRuntime
from tests.runtime.persistent_agents import keeper_agent
from tests.runtime.turn_messages import messages_to, stops
from tests.support.agent_tree import tree
from tests.support.asker import asker, parked, script

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
    await rt.store.transact(
        lambda: open_turn(
            rt.store,
            session_id="ses_lost",
            agent_type="asker",
            turn_id="run_lost0000000000000000",
            message="hello",
        )
    )

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
