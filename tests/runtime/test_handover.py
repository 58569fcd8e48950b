"""A turn's first model step starts from its committed entry, alongside DBOS's start of its
workflow (``runtime/_handover.py``); a new session's entry itself commits while the workflow
starts. The step reads nothing back, sees exactly the conversation the store holds, and is the
turn's own first step; a start that fails leaves the turn to the reconciler, whose turn runs
the step only if it had not committed; a turn whose entry failed (or never committed) ends
without writing anything."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from dbos import DBOS, SetWorkflowID

from helix_dbos.errors import (
    AgentAlreadyRunningError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import names, records
from helix_dbos.runtime._commits import opening as entry_module
from helix_dbos.runtime._facade import runtime as entering_module
from helix_dbos.runtime._turn.workflow import run_turn
from tests.psycopg_probe import record_task_statements
from tests.runtime.agents import batch_script, editor_agent
from tests.runtime.conftest import MakeRuntime
from tests.support.in_flight import InFlight

#: A turn of a new session, or the second turn of a session whose first one completed.
KINDS = pytest.mark.parametrize("kind", ["new", "follow-up"])

#: The conversation a follow-up's session holds before its entry: one completed round trip.
BEFORE = {"new": [], "follow-up": ["user", "assistant", "tool", "assistant"]}


async def _session_for(
    runtime: Any, kind: str, monkeypatch: pytest.MonkeyPatch, interrupted: bool = False
) -> str:
    """The session the test's turn starts in: a new one (its id fixed in advance), or one
    whose first turn completed (or, ``interrupted``, was interrupted while parked)."""
    if kind == "new":
        session_id = records.new_session_id()
        monkeypatch.setattr(records, "new_session_id", lambda: session_id)
        return session_id
    first = await runtime.start("editor", "1 edit")
    [call] = await runtime.wait_for_pending(first.session_id)
    if interrupted:
        await runtime.interrupt(first.session_id)
    else:
        await runtime.submit_tool_result(
            first.session_id, call["toolCallId"], result={"applied": 1}
        )
    await runtime.wait(first.session_id)
    return str(first.session_id)


async def _start(runtime: Any, kind: str, session_id: str) -> Any:
    """Start the test's turn: a new session (``_session_for`` fixed its id) or a follow-up."""
    return await runtime.start("editor", "1 edit", None if kind == "new" else session_id)


def _record_step_reads(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the checkpoint slots of the model steps that read their inputs themselves."""
    reads: list[str] = []
    real = store.step_inputs

    async def step_inputs(session_id: str, slot: str, conn: Any = None) -> Any:
        reads.append(slot)
        return await real(session_id, slot)

    monkeypatch.setattr(store, "step_inputs", step_inputs)
    return reads


@KINDS
async def test_the_first_step_takes_the_entry_it_was_handed(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The model is called with the conversation the store holds (a follow-up's earlier
    messages, then the entry, marked as the run's input), and the step does not read it
    back."""
    llm = ScriptedLLM(batch_script)
    runtime = await make_runtime([editor_agent(llm=llm)])
    session_id = await _session_for(runtime, kind, monkeypatch)
    calls = llm.calls
    reads = _record_step_reads(runtime.store, monkeypatch)
    handle = await _start(runtime, kind, session_id)
    [call] = await runtime.wait_for_pending(session_id)
    assert reads == []  # the first step read nothing back
    stored = await runtime.store.load_messages(session_id)
    request = llm.requests[calls]
    before = BEFORE[kind]
    # The earlier messages, the entry, the model's answer:
    assert [m.role for m in stored] == [*before, "user", "assistant"]
    assert request.messages == stored[: len(before) + 1]
    assert stored[len(before)].meta == {"entryInput": {"runId": handle.run_id}}

    await runtime.submit_tool_result(session_id, call["toolCallId"], result={"applied": 1})
    assert (await runtime.wait(session_id))["status"] == "completed"
    # The second step starts from what the results commit wrote (``Resumption``): it reads
    # nothing back either, and the model sees the conversation as stored, result included.
    assert reads == []
    stored = await runtime.store.load_messages(session_id)
    assert [m.role for m in stored] == [*before, "user", "assistant", "tool", "assistant"]
    assert llm.requests[calls + 1].messages == stored[: len(before) + 3]


async def test_a_follow_up_hands_over_the_conversation_it_healed(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's last turn was interrupted while parked, leaving a call unanswered: the
    follow-up's entry pairs it with a ``not_executed`` result, and its first step (started
    from the entry, reading nothing back) sends the model that healed conversation."""
    llm = ScriptedLLM(batch_script)
    runtime = await make_runtime([editor_agent(llm=llm)])
    session_id = await _session_for(runtime, "follow-up", monkeypatch, interrupted=True)
    calls = llm.calls
    reads = _record_step_reads(runtime.store, monkeypatch)
    await _start(runtime, "follow-up", session_id)
    await runtime.wait_for_pending(session_id)
    assert reads == []
    stored = await runtime.store.load_messages(session_id)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "user", "assistant"]
    assert stored[2].error_code == "not_executed"
    assert llm.requests[calls].messages == stored[:4]


async def test_concurrent_follow_ups_claim_the_session_once(make_runtime: MakeRuntime) -> None:
    """Follow-ups sent together to an idle session: one takes it, every other one is refused
    (``state_already_running``) and leaves nothing behind: one entry, one turn, one call."""
    llm = ScriptedLLM(batch_script)
    runtime = await make_runtime([editor_agent(llm=llm)])
    first = await runtime.start("editor", "1 edit")
    [call] = await runtime.wait_for_pending(first.session_id)
    await runtime.submit_tool_result(first.session_id, call["toolCallId"], result={"applied": 1})
    await first.result()
    calls = llm.calls
    started = await asyncio.gather(
        *[runtime.start("editor", f"1 edit {i}", first.session_id) for i in range(6)],
        return_exceptions=True,
    )
    taken = [s for s in started if not isinstance(s, BaseException)]
    refused = [s for s in started if isinstance(s, BaseException)]
    assert len(taken) == 1
    assert all(isinstance(e, AgentAlreadyRunningError) for e in refused), refused
    await runtime.wait_for_pending(first.session_id)
    stored = await runtime.store.load_messages(first.session_id)
    assert [m.role for m in stored] == [*BEFORE["follow-up"], "user", "assistant"]
    assert llm.calls == calls + 1
    turns = await DBOS.list_workflows_async(name=names.TURN_WORKFLOW)
    assert len(turns) == 2  # the first turn's and the one follow-up's: a refusal starts none


async def test_a_follow_ups_claim_is_one_read_and_one_statement_on_postgres(
    make_runtime: MakeRuntime, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follow-up's entry reads the session's row and conversation, then claims the session
    and appends its entry in one statement, with no transaction around them (no BEGIN, no
    COMMIT): the claim swaps from the row it read, so the read need not be in its
    transaction."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite sends each write on its own")
    runtime = await make_runtime([editor_agent(llm=ScriptedLLM(batch_script))])
    session_id = await _session_for(runtime, "follow-up", monkeypatch)
    with pytest.MonkeyPatch.context() as watching:
        sent, commands = record_task_statements(watching)
        await _start(runtime, "follow-up", session_id)
    assert len(sent) == 2, sent
    assert "__agents_messages" in sent[0] and "FOR UPDATE" not in sent[0]
    assert "cas_states" in sent[1]
    assert commands == []
    [call] = await runtime.wait_for_pending(session_id)
    await runtime.submit_tool_result(session_id, call["toolCallId"], result={"applied": 1})
    assert (await runtime.wait(session_id))["status"] == "completed"


async def _until_pending(runtime: Any, session_id: str) -> None:
    """Until the session exists (its entry committed) and has a pending call."""
    while True:
        try:
            await runtime.wait_for_pending(session_id)
            return
        except SessionNotFoundError:
            await asyncio.sleep(0.01)


@KINDS
async def test_the_first_step_runs_while_dbos_starts_the_workflow(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """DBOS's start of the workflow is held until the first model step has committed its
    call: the step cannot wait for the workflow. The turn then takes that step's answer as its
    own (the model is called once for it) and completes."""
    llm = ScriptedLLM(batch_script)
    # No reconciler: it would start a claimed session's workflow itself after its grace.
    runtime = await make_runtime([editor_agent(llm=llm)], heal_interval_seconds=0)
    session_id = await _session_for(runtime, kind, monkeypatch)
    calls = llm.calls
    real_start = entering_module._start_turn
    calls_before_start: list[int] = []

    async def held_start(*args: Any) -> Any:
        await _until_pending(runtime, session_id)
        calls_before_start.append(llm.calls - calls)
        return await real_start(*args)

    monkeypatch.setattr(entering_module, "_start_turn", held_start)
    handle = await asyncio.wait_for(_start(runtime, kind, session_id), 20)
    assert calls_before_start == [1]
    [call] = await runtime.wait_for_pending(session_id)
    await runtime.submit_tool_result(session_id, call["toolCallId"], result={"applied": 1})
    assert (await handle.result())["outcome"] == "completed"
    assert llm.calls - calls == 2
    _, _, stored = await runtime.store.step_inputs(session_id, "no-such-slot")
    assert [m.role for m in stored] == [*BEFORE[kind], "user", "assistant", "tool", "assistant"]


@KINDS
@pytest.mark.parametrize("committed", [True, False], ids=["step-committed", "step-not-run"])
async def test_a_failed_start_leaves_the_first_step_to_the_reconcilers_turn(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch, committed: bool, kind: str
) -> None:
    """DBOS's start fails after the entry committed: the caller gets the error. If the first
    step had committed, the turn the reconciler starts takes its recorded answer (no second
    model call); if not, the step is stopped before it runs, and that turn runs it."""
    llm = ScriptedLLM(batch_script)
    runtime = await make_runtime([editor_agent(llm=llm)], heal_interval_seconds=0)
    session_id = await _session_for(runtime, kind, monkeypatch)
    calls = llm.calls

    async def failed_start(*args: Any) -> Any:
        if committed:
            await _until_pending(runtime, session_id)
        raise RuntimeError("the workflow could not be started")

    monkeypatch.setattr(entering_module, "_start_turn", failed_start)
    in_flight = InFlight(runtime, monkeypatch)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(_start(runtime, kind, session_id), 20)
    # The first step has ended: committed, or stopped (a step that was not stopped would
    # have called the model by then).
    await in_flight.settled()
    [step] = in_flight.tasks
    if not committed:
        assert step.cancelled()
    # A committed step may still be cancelled in the moment between its commit and its
    # return: what it committed stands, and the model was called once (asserted below).
    assert llm.calls - calls == (1 if committed else 0)
    assert [r.action for r in await runtime.heal(grace_seconds=0)] == ["started"]
    [call] = await runtime.wait_for_pending(session_id)
    assert llm.calls - calls == 1
    await runtime.submit_tool_result(session_id, call["toolCallId"], result={"applied": 1})
    assert (await runtime.wait(session_id))["status"] == "completed"
    assert llm.calls - calls == 2
    _, _, stored = await runtime.store.step_inputs(session_id, "no-such-slot")
    assert [m.role for m in stored] == [*BEFORE[kind], "user", "assistant", "tool", "assistant"]


async def test_a_results_commit_on_a_changed_row_hands_nothing_over(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write lands between the woken turn's read and its results commit: the commit runs
    again on the row as it is, and the next step reads its inputs itself (the conversation
    read with the stale row may be stale too)."""
    llm = ScriptedLLM(batch_script)
    runtime = await make_runtime([editor_agent(llm=llm)])
    store = runtime.store
    reads: list[str] = []
    real_inputs, real_resume = store.step_inputs, store.resume_inputs

    async def step_inputs(session_id: str, slot: str, conn: Any = None) -> Any:
        reads.append(slot)
        return await real_inputs(session_id, slot)

    async def resume_inputs(session_id: str, session_ids: Any, conn: Any = None) -> Any:
        read = await real_resume(session_id, session_ids)

        def touch(states: Any) -> None:
            states[session_id].metadata["touched"] = True

        await store.update([session_id], touch)  # a write after the read: the row moved on
        return read

    monkeypatch.setattr(store, "step_inputs", step_inputs)
    monkeypatch.setattr(store, "resume_inputs", resume_inputs)
    handle = await runtime.start("editor", "1 edit")
    [call] = await runtime.wait_for_pending(handle.session_id)
    await runtime.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
    assert (await runtime.wait(handle.session_id))["status"] == "completed"
    assert len(reads) == 1  # the second step read its inputs
    _, _, stored = await real_inputs(handle.session_id, "no-such-slot")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert llm.requests[1].messages == stored[:3]
    assert (await store.get(handle.session_id)).metadata["touched"] is True


async def test_a_failed_entry_ends_its_turn_without_a_write(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry fails after the workflow started: the caller gets the entry's error, the
    turn ends ``stopped`` at once, no model is called and no session exists."""
    llm = ScriptedLLM(batch_script)
    runtime = await make_runtime([editor_agent(llm=llm)])
    session_id = records.new_session_id()
    monkeypatch.setattr(records, "new_session_id", lambda: session_id)

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailableError()

    monkeypatch.setattr(entering_module, "open_turn", refused)
    with pytest.raises(StoreUnavailableError):
        await runtime.start("editor", "1 edit")
    [workflow] = await DBOS.list_workflows_async(name=names.TURN_WORKFLOW)
    assert workflow.workflow_id.startswith(names.turn_workflow_id(session_id, ""))
    handle: Any = await DBOS.retrieve_workflow_async(workflow.workflow_id)
    assert (await handle.get_result())["outcome"] == "stopped"
    assert llm.calls == 0
    assert await runtime.store.load(session_id) is None


async def test_a_turn_without_its_entry_ends_without_a_write(make_runtime: MakeRuntime) -> None:
    """A turn whose entry never committed (its process died between the two; recovery runs
    it with nothing handed over) finds no session and ends ``stopped``, writing nothing."""
    llm = ScriptedLLM(batch_script)
    runtime = await make_runtime([editor_agent(llm=llm)])
    session_id, turn_id = "never-entered", "run-1"
    with SetWorkflowID(names.turn_workflow_id(session_id, turn_id)):
        handle: Any = await DBOS.start_workflow_async(
            run_turn, session_id, turn_id, "editor", session_id, layout=names.TURN_LAYOUT
        )
    outcome = await asyncio.wait_for(handle.get_result(), 60)
    assert outcome["outcome"] == "stopped"
    assert llm.calls == 0
    assert await runtime.store.load(session_id) is None


def test_the_entry_handed_over_is_the_entry_appended() -> None:
    """One function builds the entry's rows for both the store and the turn."""
    [message] = entry_module.entry_messages("hello", "run-1")
    assert (message.role, message.content) == ("user", "hello")
    assert entry_module.entry_messages(None, "run-1") == []


def _record_resume_reads(
    store: Any,
    monkeypatch: pytest.MonkeyPatch,
    *,
    early: Callable[[], Awaitable[None]] | None = None,
) -> list[str | None]:
    """Record who reads a woken turn's inputs: its workflow id, or ``None`` for a read
    started outside the turn (by a submit); ``early`` runs first in each of those (a fault)."""
    readers: list[str | None] = []
    real_resume = store.resume_inputs

    async def resume_inputs(session_id: str, session_ids: Any, conn: Any = None) -> Any:
        readers.append(DBOS.workflow_id)
        if early is not None and DBOS.workflow_id is None:
            await early()
        return await real_resume(session_id, session_ids)

    monkeypatch.setattr(store, "resume_inputs", resume_inputs)
    return readers


async def test_a_submit_here_runs_the_woken_turns_job(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer that completes a batch of client calls of a turn parked in this process
    runs the batch's job (``batch_job``), its read first, as it wakes the turn: on Postgres
    the turn reads nothing itself, and ends with the result applied (on SQLite the turn runs
    the job itself). A batch's first answer of two starts nothing."""
    llm = ScriptedLLM(batch_script)
    runtime = await make_runtime([editor_agent(llm=llm)])
    store = runtime.store
    readers = _record_resume_reads(store, monkeypatch)
    handle = await runtime.start("editor", "2 edits")
    first, second = await runtime.wait_for_pending(handle.session_id)
    await runtime.submit_tool_result(handle.session_id, first["toolCallId"], result={"applied": 1})
    assert readers == []
    await runtime.submit_tool_result(handle.session_id, second["toolCallId"], result={"applied": 2})
    assert (await runtime.wait(handle.session_id))["status"] == "completed"
    assert readers == ([None] if store.dialect == "postgresql" else [handle.workflow_id])
    _, _, stored = await store.step_inputs(handle.session_id, "no-such-slot")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "tool", "assistant"]
    assert llm.requests[1].messages == stored[:4]


async def _fails() -> None:
    raise StoreUnavailableError()  # a database fault


async def test_a_job_whose_read_failed_is_run_again_by_the_turn(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch, db_url: str
) -> None:
    """The read of the job a submit started fails: it wrote nothing, so the woken turn runs
    the job again (reading itself) and completes, calling the model once more."""
    if not db_url.startswith("postgresql"):
        pytest.skip("on SQLite a submit starts no job: the turn runs it")
    llm = ScriptedLLM(batch_script)
    runtime = await make_runtime([editor_agent(llm=llm)])
    readers = _record_resume_reads(runtime.store, monkeypatch, early=_fails)
    handle = await runtime.start("editor", "1 edit")
    [call] = await runtime.wait_for_pending(handle.session_id)
    await runtime.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
    assert (await runtime.wait(handle.session_id))["status"] == "completed"
    assert readers == [None, handle.workflow_id]
    assert len(llm.requests) == 2
