"""What a stop sends (``control._enforce_stop``, ``wake_stopped``): once the stop is recorded,
one ``stop`` message on every topic the stopped turn awaits, keyed by its run and call. The
message is what makes the parked coroutine leave at once (a cancelled workflow's ``recv``
notices the cancellation only at its next poll); the key makes a second stop of the same run
and call (the reconciler's, after a crash) add none, and keeps two runs' stops apart.

What a stop records with it (``stop_tree``'s transaction): for each call it cleared, a
``client_tool_abort`` count and the call's wait until the stop, and a ``resolved`` (``stopped``)
notification at the stop's instant, told to the hooks; and the turn's ``turn_end``, filed under its run.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.observability import metrics
from helix_dbos.runtime import AgentRuntime
from helix_dbos.runtime._operations.control import wake_stopped
from tests.runtime.conftest import MakeRuntime
from tests.runtime.notify_helpers import FAST, Recorder
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


async def _usage(rt: AgentRuntime, session_id: str) -> list[tuple[str, str, Any, int]]:
    """The session's custom usage rows: ``(source_type, toolCallId, value, timestamp)``."""
    query = sa.text(
        "SELECT source_type, data, timestamp FROM __agents_usage"
        " WHERE session_id = :sid AND kind = 'custom'"
    )
    async with rt.store.engine.connect() as conn:
        rows = (await conn.execute(query, {"sid": session_id})).all()
    found = []
    for source_type, data, timestamp in rows:
        fields = json.loads(data) if isinstance(data, str) else data
        found.append((str(source_type), str(fields["toolCallId"]), fields["value"], timestamp))
    return sorted(found)


async def test_a_stop_records_each_cleared_calls_abort_wait_and_resolution(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    rt.configure_notifications(**FAST)
    resolved = Recorder()
    rt.on_resolved(resolved)
    sid, pending = await parked(rt, "ask twice", count=2)
    before = await rt.session(sid)
    run_id = before.run_id or ""
    calls = sorted(p["toolCallId"] for p in pending)

    await rt.interrupt(sid)
    stopped = await rt.session(sid)
    # An interrupt's end carries no error (an abort's does: test_interrupt).
    ends = [(e.run_id, e.data) for e in await rt.events(sid) if e.type == "turn_end"]
    assert ends == [(run_id, {"outcome": "interrupted"})]
    at = {tcid: stopped.completed[tcid].completed_at for tcid in calls}
    assert len(set(at.values())) == 1  # one stop, one instant
    waits = {tcid: at[tcid] - before.pending[tcid].registered_at for tcid in calls}
    assert await _usage(rt, sid) == sorted(
        [(metrics.CLIENT_TOOL_ABORT, tcid, 1, at[tcid]) for tcid in calls]
        + [(metrics.CLIENT_TOOL_WAIT_MS, tcid, waits[tcid], at[tcid]) for tcid in calls]
    )
    await resolved.until(lambda: len(resolved.notes) == 2)
    told = sorted(
        (n.session_id, n.root_session_id, n.run_id, n.tool_call_id, n.outcome, n.at)
        for n in resolved.notes
    )
    assert told == [(sid, sid, run_id, tcid, "stopped", at[tcid]) for tcid in calls]
