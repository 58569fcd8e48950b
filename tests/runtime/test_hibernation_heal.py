"""The reconciler continues a hibernated turn whose batch is complete but not due: the last
answer was stored by a release that did not know hibernation (a rolling deploy), so nothing
made the batch due and no continuation started. Postgres and SQLite."""

from __future__ import annotations

import asyncio

from helix_dbos.core.session import SessionState
from helix_dbos.runtime._operations.heal import Repair
from helix_dbos.store.store import now_ms
from tests.runtime.agents import editor_agent
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import hibernated


async def test_the_reconciler_continues_a_complete_batch_nobody_made_due(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(
        [editor_agent(timeout=3600)],
        hibernate_after_seconds=0,
        heal_interval_seconds=0,
        deadline_keeper_seconds=0,
    )
    handle = await runtime.start("editor", "1 edit")
    mark = await hibernated(runtime, handle.session_id)
    assert mark is not None
    (call,) = (await runtime.store.get(handle.session_id)).pending.values()

    def answer_as_an_old_release_did(states: dict[str, SessionState]) -> None:
        # The answer on its entry, and nothing else: the mark keeps its due time.
        entry = states[handle.session_id].pending[call.tool_call_id]
        entry.submitted_at = now_ms()
        entry.response = {"result": {"applied": 1}}

    await runtime.store.update([handle.session_id], answer_as_an_old_release_did)
    state = await runtime.store.get(handle.session_id)
    assert state.metadata["hibernated"]["dueAt"] == mark["dueAt"] > now_ms()
    repairs = await runtime.heal(grace_seconds=0)
    # Reported on the turn's first workflow, which ended when the turn hibernated.
    assert [r for r in repairs if r.session_id == handle.session_id] == [
        Repair(handle.session_id, state.workflow_id, "SUCCESS", "continued")
    ]
    outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome["outcome"] == "completed"
    # Once continued, the next pass has nothing to do for the session.
    repairs = await runtime.heal(grace_seconds=0)
    assert [r for r in repairs if r.session_id == handle.session_id] == []
