"""Clauses of the submit itself (``runtime/_submit/answer.py``), each found by changing the
code and seeing no test fail (docs/invariant-breaks.md, "Mutation testing").

Rule 4 (ARCHITECTURE.md): the answer first, then its wake-up, in one transaction; the
in-process wake-up of a turn parked here runs only after that commit. Rule 22: the answer
that completes a hibernated turn's batch starts its continuation after that commit.
"""

from __future__ import annotations

from typing import Any

import pytest

from helix_dbos.runtime import names
from helix_dbos.runtime._turn import wake
from tests.runtime.agents import editor_agent
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import completed, continuations, hibernated
from tests.runtime.turn_messages import messages_to
from tests.support.asker import inside_recv


async def test_a_turn_parked_here_is_woken_in_process_after_the_answer_committed(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submit signals the turn's waiting ``recv`` itself, once, on the call's topic, and
    only once its transaction has committed (no unit of work is open then)."""
    rt = await make_runtime([editor_agent()])
    handle = await rt.start("editor", "1 edit")
    [call] = await rt.wait_for_pending(handle.session_id)
    workflow_id = handle.workflow_id or ""
    await inside_recv(rt, workflow_id)
    real = wake.wake_local
    seen: list[tuple[str, str, bool, bool]] = []

    def wake_local(wf: str, topic: str) -> bool:
        stored = rt.store.bound() is None  # no unit of work open: the answer committed
        found = real(wf, topic)
        seen.append((wf, topic, stored, found))
        return found

    monkeypatch.setattr("helix_dbos.runtime._submit.answer.wake_local", wake_local)
    got = await rt.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
    assert got.status == "accepted"
    assert got.owner_workflow_id == workflow_id
    topic = names.tool_result_topic(call["toolCallId"])
    [(woken, on, committed, found)] = seen
    assert (woken, on, committed) == (workflow_id, topic, True)
    # On SQLite nothing else wakes the recv (DBOS polls its table): the submit's signal found
    # it waiting. On Postgres DBOS's own listener may have woken it first, on the NOTIFY of
    # the committed message, so the signal may find nobody waiting any more.
    assert found or rt.store.dialect == "postgresql"
    assert (await rt.wait(handle.session_id))["status"] == "completed"


async def test_an_accepted_answer_names_its_call_on_the_wire(make_runtime: MakeRuntime) -> None:
    """The wire form of an accepted answer is ``{"status", "continuation", "toolCallId"}``
    (docs/http-api.md): the client matches each answer to its call by that id."""
    rt = await make_runtime([editor_agent()])
    handle = await rt.start("editor", "1 edit")
    [call] = await rt.wait_for_pending(handle.session_id)
    tcid = call["toolCallId"]
    got = await rt.submit_tool_result(handle.session_id, tcid, result={"applied": 1})
    assert got.dump() == {
        "status": "accepted",
        "continuation": {"kind": "new_run", "runId": names.next_run_id(handle.run_id)},
        "toolCallId": tcid,
    }
    assert (await rt.wait(handle.session_id))["status"] == "completed"


async def test_a_duplicate_of_a_stored_answer_keeps_the_first_and_says_what_it_awaits(
    make_runtime: MakeRuntime,
) -> None:
    """A re-send of an answer stored but not yet drained (its batch still awaits another
    call) answers ``already_completed`` for that call, with the batch's continuation
    (``awaiting_batch``); the first answer is the one kept and the one the model sees."""
    rt = await make_runtime([editor_agent()])
    handle = await rt.start("editor", "2 edits")
    first, second = await rt.wait_for_pending(handle.session_id, 2)
    tcid = first["toolCallId"]
    got = await rt.submit_tool_result(handle.session_id, tcid, result={"applied": 1})
    assert (got.status, got.continuation and got.continuation.kind) == (
        "accepted",
        "awaiting_batch",
    )
    again = await rt.submit_tool_result(handle.session_id, tcid, result={"applied": 7})
    assert again.status == "already_completed"
    assert again.tool_call_id == tcid
    assert again.continuation is not None and again.continuation.kind == "awaiting_batch"
    last = await rt.submit_tool_result(
        handle.session_id, second["toolCallId"], result={"applied": 2}
    )
    assert last.continuation is not None and last.continuation.kind == "new_run"
    assert last.continuation.run_id == names.next_run_id(handle.run_id)
    assert (await rt.wait(handle.session_id))["status"] == "completed"
    tool = [m for m in await rt.messages(handle.session_id) if m.role == "tool"]
    assert [m.result for m in tool] == [{"applied": 1}, {"applied": 2}]


async def test_a_wake_up_that_could_not_be_enlisted_is_sent_after_the_commit(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer's transaction could not enlist its wake-up: it runs again without it, the
    answer commits alone, and the wake-up is sent once after the commit, under the answer's
    idempotency key. The turn then completes with the answer."""
    rt = await make_runtime([editor_agent()])
    handle = await rt.start("editor", "1 edit")
    [call] = await rt.wait_for_pending(handle.session_id)
    tcid = call["toolCallId"]

    async def enlist(*args: Any) -> None:
        raise RuntimeError("the notifications table is not reachable")

    real_send = wake.send_to_turn
    sent: list[tuple[str, Any, str, str, int | None]] = []

    async def send_to_turn(ctx: Any, wf: str, message: Any, topic: str, key: str) -> None:
        # The turn is not woken yet: its entry is still pending, with the answer committed.
        stored = (await rt.session(handle.session_id)).pending[tcid].submitted_at
        sent.append((wf, message, topic, key, stored))
        await real_send(ctx, wf, message, topic, key)

    monkeypatch.setattr(wake, "enlist", enlist)
    monkeypatch.setattr("helix_dbos.runtime._submit.answer.send_to_turn", send_to_turn)
    got = await rt.submit_tool_result(handle.session_id, tcid, result={"applied": 1})
    assert got.status == "accepted"
    [(wf, message, topic, key, stored)] = sent
    assert stored is not None
    assert (wf, topic, key) == (
        handle.workflow_id,
        names.tool_result_topic(tcid),
        names.submit_idempotency_key(handle.run_id, tcid),
    )
    assert message == {"kind": "answer", "toolCallId": tcid, "submittedAt": stored}
    assert (await rt.wait(handle.session_id))["status"] == "completed"


async def test_a_duplicate_submits_wake_up_is_the_first_ones_message(
    make_runtime: MakeRuntime,
) -> None:
    """The answer's wake-up goes under the key ``<runId>:<toolCallId>``; the re-wake of a
    duplicate submit goes under the same key, so DBOS keeps one message for the call."""
    rt = await make_runtime([editor_agent()])
    handle = await rt.start("editor", "2 edits")
    first, second = await rt.wait_for_pending(handle.session_id, 2)
    tcid = first["toolCallId"]
    for _ in range(2):
        await rt.submit_tool_result(handle.session_id, tcid, result={"applied": 1})
    assert handle.workflow_id is not None
    held = await messages_to(rt, handle.workflow_id)
    assert [topic for topic, _, _ in held].count(names.tool_result_topic(tcid)) == 1
    await rt.submit_tool_result(handle.session_id, second["toolCallId"], result={"applied": 2})
    assert (await rt.wait(handle.session_id))["status"] == "completed"


async def test_the_answer_completing_a_hibernated_batch_starts_its_continuation_here(
    make_runtime: MakeRuntime,
) -> None:
    """A hibernated turn has no workflow to wake: the submit whose answer completes its batch
    starts the continuation itself once the answer committed, and says so
    (``continued_here``, which spares the runtime asking the fleet who runs it). An answer
    that leaves the batch waiting starts nothing and says so. The deadline keeper is off, so
    nothing but the submit starts it."""
    rt = await make_runtime([editor_agent()], hibernate_after_seconds=0, deadline_keeper_seconds=0)
    handle = await rt.start("editor", "2 edits")
    sid = handle.session_id
    await hibernated(rt, sid)
    state = await rt.store.get(sid)
    first, last = sorted(state.pending.values(), key=lambda p: p.index)
    partial = await rt.submit_tool_result(sid, first.tool_call_id, result={"applied": 1})
    assert partial.continuation is not None and partial.continuation.kind == "awaiting_batch"
    assert partial.continued_here is False
    assert await continuations(sid) == []
    answer = await rt.submit_tool_result(sid, last.tool_call_id, result={"applied": 2})
    assert answer.continuation is not None and answer.continuation.kind == "new_run"
    assert answer.continued_here is True
    assert [w.workflow_id for w in await continuations(sid)] == [
        names.continuation_workflow_id(sid, handle.run_id)
    ]
    await completed(rt, handle)
