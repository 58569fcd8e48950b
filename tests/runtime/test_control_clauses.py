"""What a stop sends (``control._enforce_stop``, ``wake_stopped``): once the stop is recorded,
one ``stop`` message on every topic the stopped turn awaits, keyed by its run and call. The
message is what makes the parked coroutine leave at once (a cancelled workflow's ``recv``
notices the cancellation only at its next poll); the key makes a second stop of the same run
and call (the reconciler's, after a crash) add none, and keeps two runs' stops apart.

What a stop records with it (``stop_tree``'s transaction): for each call it cleared, a
``client_tool_abort`` count and the call's wait until the stop, and a ``resolved`` (``stopped``)
notification at the stop's instant, told to the hooks; and the turn's ``turn_end``, filed under its run.

What a new message over a parked turn's calls is told (``control.stash_entry``): refused while a
sub-agent of the session still waits, refused on a partial batch unless it abandons the batch
(naming every call awaited), refused when a message is stashed over the batch already; and an
abandon sends one ``abandon`` message on each call's topic of the batch, keyed by its run and call.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from helix_dbos.core.session import SessionState
from helix_dbos.errors import AgentAlreadyRunningError, AgentNotResumableError
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.observability import metrics
from helix_dbos.runtime import AgentRuntime, names, records
from helix_dbos.runtime._operations.control import wake_stopped
from helix_dbos.store import dbos_messages
from tests.runtime.conftest import MakeRuntime
from tests.runtime.notify_helpers import FAST, Recorder
from tests.runtime.turn_messages import messages_to, stops
from tests.support.agent_tree import tree
from tests.support.asker import asker, parked, script

NEW_MESSAGE = "never mind"


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


async def test_a_new_message_is_refused_while_a_sub_agent_waits(make_runtime: MakeRuntime) -> None:
    """The root waits on its sub-agents, whose grandchild awaits the client: a new message for
    the root would land in the middle of their wait. Refused, naming the session; nothing is
    written."""
    root_agent, _ = tree()
    rt = await make_runtime([root_agent])
    handle = await rt.start("root", "go")
    await rt.wait_for_pending(handle.session_id)
    before = await rt.session(handle.session_id)

    with pytest.raises(AgentNotResumableError) as refused:
        await rt.resume(handle.session_id, "with_message", NEW_MESSAGE, abandon_pending=True)
    assert refused.value.code == "state_not_resumable"
    assert refused.value.details == {"sessionId": handle.session_id}
    assert "awaits sub-agents" in refused.value.message
    after = await rt.session(handle.session_id)
    assert after.version == before.version and records.STASH_KEY not in after.metadata


async def test_a_new_message_over_a_partial_batch_names_every_call_awaited(
    make_runtime: MakeRuntime,
) -> None:
    """Without ``abandon_pending``, a message over a batch of two unanswered calls is refused
    (retryable), naming both calls, in the batch's order, in its message and its details."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    sid, pending = await parked(rt, "ask twice", count=2)
    calls = [p["toolCallId"] for p in pending]

    with pytest.raises(AgentNotResumableError) as refused:
        await rt.resume(sid, "with_message", NEW_MESSAGE)
    assert refused.value.retryable is True
    assert refused.value.details == {"sessionId": sid, "awaitedToolCallIds": calls}
    assert refused.value.message.endswith(f"still awaiting {calls[0]}, {calls[1]}")
    assert records.STASH_KEY not in (await rt.session(sid)).metadata


async def test_a_second_message_over_a_stashed_one_is_refused(make_runtime: MakeRuntime) -> None:
    """A message is stashed over the batch already (another one reached the row first): the
    batch is being drained, so a second message is refused as for a turn already continuing,
    and the first stays as it was."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    sid, _ = await parked(rt)
    first = {"message": "first", "abandonPending": True, "runId": (await rt.session(sid)).run_id}

    def stash(states: dict[str, SessionState]) -> None:
        states[sid].metadata[records.STASH_KEY] = dict(first)

    await rt.store.update([sid], stash)
    before = await rt.session(sid)

    with pytest.raises(AgentAlreadyRunningError) as busy:
        await rt.resume(sid, "with_message", NEW_MESSAGE, abandon_pending=True)
    assert busy.value.details == {"sessionId": sid}
    assert "already continuing" in busy.value.message
    after = await rt.session(sid)
    assert after.version == before.version and after.metadata[records.STASH_KEY] == first


async def test_an_abandon_sends_one_abandon_on_each_call_keyed_by_run_and_call(
    make_runtime: MakeRuntime,
) -> None:
    """A message that abandons a parked turn's batch wakes it with one ``abandon`` message on
    each call's topic of the batch, keyed by the batch's run and the call: the message is
    delivered, and the turn ends."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    sid, pending = await parked(rt, "ask twice", count=2)
    state = await rt.session(sid)
    workflow_id, run_id = state.workflow_id or "", state.run_id or ""

    resumed = await rt.resume(sid, "with_message", NEW_MESSAGE, abandon_pending=True)
    assert resumed.run_id == names.next_run_id(run_id)
    assert (await rt.wait(sid))["status"] == "completed"
    assert await messages_to(rt, workflow_id) == sorted(
        (
            names.tool_result_topic(tcid),
            dbos_messages.row_key(
                names.control_idempotency_key(run_id, tcid, "abandon"), workflow_id
            ),
            {"kind": "abandon"},
        )
        for tcid in (p["toolCallId"] for p in pending)
    )
