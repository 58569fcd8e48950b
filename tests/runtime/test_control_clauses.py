"""What a stop sends (``control._enforce_stop``, ``wake_stopped``): once the stop is recorded,
one ``stop`` message on every topic the stopped turn awaits, keyed by its run and call. The
message is what makes the parked coroutine leave at once (a cancelled workflow's ``recv``
notices the cancellation only at its next poll); the key makes a second stop of the same run
and call (the reconciler's, after a crash) add none, and keeps two runs' stops apart.
"""

from __future__ import annotations

from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime._operations.control import wake_stopped
from tests.runtime.conftest import MakeRuntime
from tests.runtime.turn_messages import messages_to, stops
from tests.support.asker import asker, parked, script


async def test_a_stop_sends_one_stop_on_every_awaited_topic_keyed_by_run_and_call(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    sid, pending = await parked(rt, "ask twice", count=2)
    state = await rt.session(sid)
    workflow_id, run_id = state.workflow_id or "", state.run_id or ""
    calls = [p["toolCallId"] for p in pending]

    await rt.interrupt(sid)
    assert await messages_to(rt, workflow_id) == stops(workflow_id, run_id, calls)
    # The reconciler's stop of the same run and calls (``heal._cancel_orphan``) adds none.
    for tcid in calls:
        await wake_stopped(rt.ctx, workflow_id, run_id, tcid)
    assert await messages_to(rt, workflow_id) == stops(workflow_id, run_id, calls)
