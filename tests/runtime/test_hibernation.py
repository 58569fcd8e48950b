"""Hibernation: a turn parked past its hot window ends its workflow; a submit, a new message
or the batch's deadline continues it from the row (``runtime/_turn/hibernation.py``,
``runtime/_hibernated/continuation.py``). On Postgres and SQLite.

Each duplicate or concurrent start of a continuation must start ONE workflow that runs each
model step once and commits one result per call; a stop removes what would continue it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dbos import DBOS

from helix_dbos.core import define_agent, define_tool
from helix_dbos.errors import AgentAlreadyRunningError, AgentNotResumableError
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.observability import metrics
from helix_dbos.runtime import names
from helix_dbos.runtime._hibernated import keeper
from helix_dbos.testing import capture_log_events
from tests.runtime.agents import editor_agent
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import (
    ARGS,
    Query,
    Transfer,
    agent,
    assert_paired,
    cold_turn,
    completed,
    continuations,
    counters,
    edit_tool,
    hibernated,
    mixed_script,
    model_rows,
    pay_script,
    script,
    tool_results,
    wait_until,
    workflow_result,
)

NEW_MESSAGE = "never mind, do Y instead"


async def test_a_turn_hibernates_and_a_submit_continues_it(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime([editor_agent()], hibernate_after_seconds=0)
    handle = await runtime.start("editor", "2 edits")
    mark = await hibernated(runtime, handle.session_id)
    assert mark is not None and mark["step"] == 0
    assert (await workflow_result(handle.workflow_id))["outcome"] == "hibernated"
    state = await runtime.store.get(handle.session_id)
    assert state.status == "suspended_client_tool"
    calls = sorted(state.pending.values(), key=lambda p: p.index)
    answer = await runtime.submit_tool_result(
        handle.session_id, calls[0].tool_call_id, result={"applied": 1}
    )
    assert answer.continuation is not None and answer.continuation.kind == "awaiting_batch"
    answer = await runtime.submit_tool_result(
        handle.session_id, calls[1].tool_call_id, result={"applied": 2}
    )
    assert answer.continuation is not None and answer.continuation.kind == "new_run"
    outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome["outcome"] == "completed"
    assert "applied" in outcome["text"]
    state = await runtime.store.get(handle.session_id)
    assert state.status == "completed"
    assert "hibernated" not in state.metadata
    assert state.workflow_id == names.continuation_workflow_id(handle.session_id, calls[0].run_id)


# -- duplicate and concurrent submits -----------------------------------------------------------


async def test_duplicate_submits_of_the_last_answer_start_one_continuation(
    make_runtime: MakeRuntime,
) -> None:
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm)])
    handle, (first, last) = await cold_turn(runtime)
    sid = handle.session_id
    await runtime.submit_tool_result(sid, first, result={"applied": 1})
    answers = await asyncio.gather(
        *[runtime.submit_tool_result(sid, last, result={"applied": 2}) for _ in range(4)]
    )
    assert sorted(a.status for a in answers) == ["accepted"] + ["already_completed"] * 3
    await completed(runtime, handle)
    # Once more after the end: answered from the tombstone, nothing starts.
    late = await runtime.submit_tool_result(sid, last, result={"applied": 2})
    assert late.status == "already_completed"
    assert [w.workflow_id for w in await continuations(sid)] == [
        names.continuation_workflow_id(sid, handle.run_id)
    ]
    assert llm.calls == 2 and await model_rows(runtime, sid) == 2
    assert await tool_results(runtime, sid) == [first, last]


async def test_concurrent_last_answers_start_one_continuation(make_runtime: MakeRuntime) -> None:
    """The two last answers of a batch at once: whichever completes the batch starts the
    continuation (the other may see it complete too); one runs."""
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm)])
    handle, calls = await cold_turn(runtime, "3 edits")
    sid = handle.session_id
    await runtime.submit_tool_result(sid, calls[0], result={"applied": 1})
    answers = await asyncio.gather(
        *[runtime.submit_tool_result(sid, c, result={"applied": 2}) for c in calls[1:]],
        *[runtime.submit_tool_result(sid, c, result={"applied": 2}) for c in calls[1:]],
    )
    assert sorted(a.status for a in answers) == ["accepted"] * 2 + ["already_completed"] * 2
    assert "new_run" in [a.continuation.kind for a in answers if a.continuation]
    outcome = await completed(runtime, handle)
    assert outcome["text"] == 'results: {"applied": 1} | {"applied": 2} | {"applied": 2}'
    assert len(await continuations(sid)) == 1
    assert llm.calls == 2 and await model_rows(runtime, sid) == 2
    assert await tool_results(runtime, sid) == calls


async def test_a_turn_hibernates_on_each_batch_and_its_handle_follows(
    make_runtime: MakeRuntime,
) -> None:
    """Two batches in one turn: the continuation of the first hibernates on the second, whose
    own continuation ends the turn; ``result()`` follows both."""
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm)])
    handle, (a, b) = await cold_turn(runtime, "2+1 edits")
    sid = handle.session_id
    await asyncio.gather(
        *[runtime.submit_tool_result(sid, c, result={"applied": 1}) for c in (a, b)]
    )

    async def second_batch() -> Any:
        state = await runtime.store.get(sid)
        return state.metadata.get("hibernated") and state.run_id != handle.run_id and state

    state = await wait_until(second_batch)
    assert state, "the continuation did not hibernate on the second batch"
    (c,) = state.pending
    assert state.workflow_id == names.continuation_workflow_id(sid, handle.run_id)
    await runtime.submit_tool_result(sid, c, result={"applied": 3})
    outcome = await completed(runtime, handle)
    assert outcome["text"].endswith('{"applied": 3}')
    assert sorted(w.workflow_id for w in await continuations(sid)) == sorted(
        [
            names.continuation_workflow_id(sid, handle.run_id),
            names.continuation_workflow_id(sid, state.run_id),
        ]
    )
    assert llm.calls == 3 and await tool_results(runtime, sid) == [a, b, c]


async def test_a_continuation_parked_in_its_hot_window_is_woken_live(
    make_runtime: MakeRuntime,
) -> None:
    """The first batch hibernates when its 2 s window ends; the continuation parks live on
    the second, whose answer (sent to the continuation, which the row now names) wakes it:
    no second hibernation, no second continuation."""
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("warm", llm, hibernate_after=2.0)])
    handle, (a,) = await cold_turn(runtime, "1+1 edits", name="warm")
    sid = handle.session_id
    continuation = names.continuation_workflow_id(sid, handle.run_id)
    await runtime.submit_tool_result(sid, a, result={"applied": 1})

    async def parked_live() -> bool:
        return continuation in runtime.ctx.parked

    assert await wait_until(parked_live), "the continuation did not park on the second batch"
    state = await runtime.session(sid)
    assert state.workflow_id == continuation and "hibernated" not in state.metadata
    (b,) = state.pending
    answer = await runtime.submit_tool_result(sid, b, result={"applied": 2})
    assert answer.owner_workflow_id == continuation
    outcome = await completed(runtime, handle)
    assert outcome["text"] == 'results: {"applied": 1} | {"applied": 2}'
    assert [w.workflow_id for w in await continuations(sid)] == [continuation]
    assert llm.calls == 3 and await tool_results(runtime, sid) == [a, b]


async def test_results_known_before_the_park_are_committed_by_the_continuation(
    make_runtime: MakeRuntime,
) -> None:
    """The server tool ran before the park, and the invalid call was answered there: the
    continuation commits both from the hibernation record, and runs neither again."""
    lookups: list[str] = []

    def lookup(args: Query) -> dict[str, Any]:
        lookups.append(args.key)
        return {"value": 7}

    llm = ScriptedLLM(mixed_script)
    tools = [edit_tool(300), define_tool("lookup", "Look up", Query, execute=lookup)]
    runtime = await make_runtime([define_agent("mixed", llm=llm, tools=tools, hibernate_after=0)])
    handle = await runtime.start("mixed", "go")
    assert await hibernated(runtime, handle.session_id) is not None
    [edit] = (await runtime.status(handle.session_id))["pendingToolCalls"]
    await runtime.submit_tool_result(handle.session_id, edit["toolCallId"], result={"applied": 1})
    outcome = await completed(runtime, handle)
    assert outcome["text"] == '{"value": 7} | {"applied": 1} | validation_failed'
    assert lookups == ["k"], "the server tool ran once, before the park"
    history = await runtime.messages(handle.session_id)
    assert_paired(history)
    assert len([m for m in history if m.role == "tool"]) == 3 and llm.calls == 2


async def test_contract_2_turns_stay_hot(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hot window 0: yet a turn recorded in layout 2 (as a contract-2 process recorded it,
    which replays its waits as recorded) waits live, and ends in its own workflow. (A
    sub-agent's turn hibernates: ``test_hibernation_subagents.py``.)"""
    runtime = await make_runtime([agent("cold")], hibernate_after_seconds=0)
    monkeypatch.setattr(names, "TURN_LAYOUT", 2)
    contract_2 = await runtime.start("cold", "1 edit")
    monkeypatch.undo()
    [pending] = await runtime.wait_for_pending(contract_2.session_id)
    answer = await runtime.submit_tool_result(
        contract_2.session_id, pending["toolCallId"], result={"applied": 1}
    )
    assert answer.status == "accepted"
    assert (await runtime.wait(contract_2.session_id))["status"] == "completed"
    assert (await workflow_result(contract_2.workflow_id))["outcome"] == "completed"
    assert await DBOS.list_workflows_async(name=names.CONTINUE_WORKFLOW) == []


# -- the deadline, with no request ------------------------------------------------------------


async def test_a_hibernated_call_times_out_with_no_request(make_runtime: MakeRuntime) -> None:
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm, timeout=1.5)], deadline_keeper_seconds=0.2)
    with capture_log_events() as logged:
        handle, [tcid] = await cold_turn(runtime, "1 edit")
        outcome = await completed(runtime, handle)
    sid = handle.session_id
    assert outcome["text"] == "results: client_tool_timeout"
    assert llm.requests[-1].messages[-1].error_code == "client_tool_timeout"
    assert await counters(runtime, sid) == [(metrics.CLIENT_TOOL_TIMEOUT, tcid)]
    timeouts = [e for e in logged if e["event"] == "client_tool.timeout"]
    assert [(e["sessionId"], e["toolCallId"]) for e in timeouts] == [(sid, tcid)]
    assert [e["sessionId"] for e in logged if e["event"] == "turn.continuation_due"] == [sid]
    assert (await runtime.session(sid)).completed[tcid].outcome == "timeout"
    assert len(await continuations(sid)) == 1 and llm.calls == 2


async def test_a_continuation_reads_its_record_and_rows_once(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A continuation takes its hibernation record up with the session's rows and
    conversation in one read; its results commit swaps from those rows and hands the next
    model step its inputs: nothing reads the record, the rows or the conversation again."""
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm, timeout=1.5)], deadline_keeper_seconds=0.2)
    store = runtime.store
    reads: list[str] = []
    for name in ("resume_recorded", "resume_inputs", "get_checkpoint", "step_inputs"):
        monkeypatch.setattr(store, name, _counted(name, getattr(store, name), reads))
    handle, _ = await cold_turn(runtime, "1 edit")
    reads.clear()  # the turn's own, before it hibernated
    outcome = await completed(runtime, handle)
    assert outcome["text"] == "results: client_tool_timeout"
    assert reads == ["resume_recorded"]


async def test_a_write_after_the_continuations_read_is_not_lost(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write lands on the row between the continuation's read and its results commit: the
    commit swaps from the row as it is then (the write stays), and the next model step reads
    its inputs itself."""
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm, timeout=1.5)], deadline_keeper_seconds=0.2)
    store = runtime.store
    real = store.resume_recorded
    reads: list[str] = []

    async def read_then_write(session_id: str, session_ids: Any, slot: str) -> Any:
        read = await real(session_id, session_ids, slot)

        def touch(states: Any) -> None:
            states[session_id].metadata["touched"] = True

        await store.update([session_id], touch)
        return read

    monkeypatch.setattr(store, "resume_recorded", read_then_write)
    monkeypatch.setattr(store, "step_inputs", _counted("step_inputs", store.step_inputs, reads))
    handle, [tcid] = await cold_turn(runtime, "1 edit")
    reads.clear()
    outcome = await completed(runtime, handle)
    assert outcome["text"] == "results: client_tool_timeout"
    state = await runtime.session(handle.session_id)
    assert state.metadata.get("touched") is True and state.completed[tcid].outcome == "timeout"
    assert reads == ["step_inputs"] and llm.calls == 2


def _counted(name: str, real: Any, reads: list[str]) -> Any:
    async def read(*args: Any, **kwargs: Any) -> Any:
        reads.append(name)
        return await real(*args, **kwargs)

    return read


async def test_a_partial_hibernated_batch_times_out_its_unanswered_call_only(
    make_runtime: MakeRuntime,
) -> None:
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm, timeout=1.5)], deadline_keeper_seconds=0.2)
    with capture_log_events() as logged:
        handle, (answered, unanswered) = await cold_turn(runtime)
        sid = handle.session_id
        answer = await runtime.submit_tool_result(sid, answered, result={"applied": 1})
        assert answer.status == "accepted" and answer.continuation is not None
        assert answer.continuation.kind == "awaiting_batch"
        outcome = await completed(runtime, handle)
    assert outcome["text"] == 'results: {"applied": 1} | client_tool_timeout'
    assert await counters(runtime, sid) == [(metrics.CLIENT_TOOL_TIMEOUT, unanswered)]
    timeouts = [e["toolCallId"] for e in logged if e["event"] == "client_tool.timeout"]
    assert timeouts == [unanswered]
    state = await runtime.session(sid)
    assert state.completed[answered].outcome == "answered"
    assert state.completed[unanswered].outcome == "timeout"
    assert await tool_results(runtime, sid) == [answered, unanswered] and llm.calls == 2


# -- interrupt, abandon, drain-first ----------------------------------------------------------


async def test_interrupt_of_a_hibernated_turn_leaves_nothing_to_continue(
    make_runtime: MakeRuntime,
) -> None:
    """As a hot park's: the mark goes with the pending calls, a late submit is refused, the
    keeper finds nothing, and the turn's handle ends ``stopped`` (a hot one's raises, its
    workflow cancelled), not waiting for a continuation nothing starts."""
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm)], deadline_keeper_seconds=0)
    handle, (first, second) = await cold_turn(runtime)
    sid = handle.session_id
    await runtime.submit_tool_result(sid, first, result={"applied": 1})
    stopped = await runtime.interrupt(sid)
    assert stopped.status == "interrupted"
    assert "hibernated" not in stopped.metadata and stopped.pending == {}
    late = await runtime.submit_tool_result(sid, second, result={"applied": 2})
    assert late.status == "unknown_tool_call" and late.reason == "run_stopped"
    assert await keeper.keep_once(runtime.ctx) == 0
    assert await continuations(sid) == []
    assert (await runtime.session(sid)).status == "interrupted" and llm.calls == 1
    outcome = await asyncio.wait_for(handle.result(), 10)
    assert outcome["outcome"] == "stopped" and outcome["runId"] == handle.run_id
    # An abort, the same, ending failed.
    aborted, (tcid, _) = await cold_turn(runtime)
    state = await runtime.abort(aborted.session_id, "operator stop")
    assert state.status == "failed" and (state.error or {}).get("code") == "framework_cancelled"
    assert "hibernated" not in state.metadata
    late = await runtime.submit_tool_result(aborted.session_id, tcid, result={"applied": 1})
    assert late.status == "unknown_tool_call" and late.reason == "run_stopped"
    assert await continuations(aborted.session_id) == []


async def test_drain_first_is_refused_then_abandon_continues_at_once(
    make_runtime: MakeRuntime,
) -> None:
    """A partial hibernated batch: a drain-first message is refused typed, as for a hot park,
    writing nothing; an abandoning one continues the turn at once (the keeper is off and the
    calls wait 300 s: the message alone starts the continuation)."""
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm)], deadline_keeper_seconds=0)
    handle, (answered, abandoned) = await cold_turn(runtime)
    sid = handle.session_id
    await runtime.submit_tool_result(sid, answered, result={"applied": 1})
    before = await runtime.session(sid)
    with pytest.raises(AgentNotResumableError) as refused:
        await runtime.resume(sid, "with_message", NEW_MESSAGE)
    assert refused.value.code == "state_not_resumable" and refused.value.retryable is True
    assert refused.value.details["awaitedToolCallIds"] == [abandoned]
    with pytest.raises(AgentAlreadyRunningError) as busy:  # as for any parked turn
        await runtime.start("cold", NEW_MESSAGE, session_id=sid)
    assert busy.value.retryable is False
    assert busy.value.details["awaitedToolCallIds"] == [abandoned]
    after = await runtime.session(sid)
    assert after.version == before.version and after.metadata == before.metadata
    assert await continuations(sid) == []

    resumed = await runtime.resume(sid, "with_message", NEW_MESSAGE, abandon_pending=True)
    assert resumed.run_id == names.next_run_id(handle.run_id)
    view = await runtime.wait(sid, timeout=30)
    assert view["status"] == "completed"
    history = await runtime.messages(sid)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    by_id = {m.tool_call_id: m for m in history if m.role == "tool"}
    assert by_id[answered].result == {"applied": 1}
    assert by_id[abandoned].error_code == "client_tool_abandoned"
    assert history[4].content == NEW_MESSAGE and history[5].content == f"echo: {NEW_MESSAGE}"
    assert llm.calls == 2 and len(await continuations(sid)) == 1
    assert (await runtime.session(sid)).completed[abandoned].outcome == "abandoned"


async def test_abandon_racing_the_last_answer_continues_once(make_runtime: MakeRuntime) -> None:
    """A new message that abandons the batch and the batch's last answer, at once: both start
    the continuation, which runs once; the call has one result (the answer, or abandoned).
    When the continuation took the batch before the message reached the row, the message is
    refused as for a hot turn already continuing (``AgentAlreadyRunningError``), and nothing
    of it is written."""
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm)], deadline_keeper_seconds=0)
    handle, (first, last) = await cold_turn(runtime)
    sid = handle.session_id
    await runtime.submit_tool_result(sid, first, result={"applied": 1})
    resumed, _ = await asyncio.gather(
        runtime.resume(sid, "with_message", NEW_MESSAGE, abandon_pending=True),
        runtime.submit_tool_result(sid, last, result={"applied": 2}),
        return_exceptions=True,
    )
    assert (await runtime.wait(sid, timeout=30))["status"] == "completed"
    history = await runtime.messages(sid)
    assert [m.tool_call_id for m in history if m.role == "tool"] == [first, last]
    assert llm.calls == 2 and len(await continuations(sid)) == 1
    if isinstance(resumed, AgentAlreadyRunningError):
        assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
        assert history[3].result == {"applied": 2}
        return
    assert not isinstance(resumed, BaseException), resumed
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert history[3].result == {"applied": 2} or history[3].error_code == "client_tool_abandoned"
    assert history[4].content == NEW_MESSAGE


# -- retry and rewind -----------------------------------------------------------------------------


async def test_retry_after_interrupting_a_hibernated_turn(make_runtime: MakeRuntime) -> None:
    """As for any interrupted session: the retry's run starts from its message; its own batch
    hibernates and continues like the first."""
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm)])
    handle, (first, second) = await cold_turn(runtime)
    sid = handle.session_id
    await runtime.submit_tool_result(sid, first, result={"applied": 1})
    await runtime.interrupt(sid)
    retried = await runtime.retry(sid, message="1 more edit")

    async def parked_again() -> Any:
        state = await runtime.store.get(sid)
        return state.metadata.get("hibernated") and state.run_id != handle.run_id and state

    state = await wait_until(parked_again)
    assert state, "the retried run did not hibernate on its batch"
    (again,) = state.pending
    late = await runtime.submit_tool_result(sid, second, result={"applied": 2})
    assert late.status == "unknown_tool_call"
    await runtime.submit_tool_result(sid, again, result={"applied": 3})
    outcome = await completed(runtime, retried)
    assert outcome["text"].endswith('{"applied": 3}')
    history = await runtime.messages(sid)
    assert_paired(history)
    assert [m.content for m in history if m.role == "user"] == ["2 edits", "1 more edit"]
    assert (await tool_results(runtime, sid))[-1] == again
    assert [w.workflow_id for w in await continuations(sid)] == [
        names.continuation_workflow_id(sid, state.run_id)
    ]
    assert llm.calls == 3


async def test_rewind_after_interrupting_a_hibernated_turn(make_runtime: MakeRuntime) -> None:
    """Back to the model's answer of the hibernated step: the new run takes the calls over
    with no model call, hibernates on them again, and a submit continues it."""
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("cold", llm)])
    handle, calls = await cold_turn(runtime)
    sid = handle.session_id
    await runtime.interrupt(sid)
    model_cp = next(c for c in await runtime.checkpoints(sid) if c["kind"] == "model")
    rewound = await runtime.rewind(sid, model_cp["checkpointId"])

    async def parked_again() -> Any:
        state = await runtime.store.get(sid)
        return state.metadata.get("hibernated") and state.run_id == rewound.run_id and state

    state = await wait_until(parked_again)
    assert state, "the rewound run did not hibernate on the restored batch"
    assert sorted(state.pending) == sorted(calls) and llm.calls == 1
    for n, tcid in enumerate(calls):
        await runtime.submit_tool_result(sid, tcid, result={"applied": n})
    outcome = await completed(runtime, rewound)
    assert outcome["text"] == 'results: {"applied": 0} | {"applied": 1}'
    assert await tool_results(runtime, sid) == calls
    assert len(await continuations(sid)) == 1 and llm.calls == 2


# -- approvals ----------------------------------------------------------------------------------


async def test_an_approved_call_of_a_hibernated_turn_runs_once(make_runtime: MakeRuntime) -> None:
    runs: list[dict[str, Any]] = []

    def transfer(args: Transfer) -> dict[str, Any]:
        runs.append(args.model_dump())
        return {"transferred": args.amount}

    llm = ScriptedLLM(pay_script)
    gated = define_tool("transfer", "Move money", Transfer, execute=transfer, require_approval=True)
    banker = define_agent("banker", llm=llm, tools=[gated], hibernate_after=0)
    runtime = await make_runtime([banker])
    handle = await runtime.start("banker", "pay alice")
    sid = handle.session_id
    assert await hibernated(runtime, sid) is not None
    [pending] = (await runtime.status(sid))["pendingToolCalls"]
    assert pending["kind"] == "approval" and runs == []
    approvals = [
        runtime.submit_tool_result(
            sid,
            pending["toolCallId"],
            kind="approval-response",
            approval_id=pending["approvalId"],
            approved=True,
        )
        for _ in range(2)
    ]
    answers = await asyncio.gather(*approvals)
    assert sorted(a.status for a in answers) == ["accepted", "already_completed"]
    outcome = await completed(runtime, handle)
    assert outcome["text"] == 'ok: {"transferred": 40}'
    assert runs == [ARGS], "the approved tool ran once, in the continuation"
    assert len(await continuations(sid)) == 1 and llm.calls == 2
    assert await tool_results(runtime, sid) == [pending["toolCallId"]]
