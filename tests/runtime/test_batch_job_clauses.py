"""Who may start a batch's job (ARCHITECTURE.md, rule 20): the submit that completes a batch
of client calls of a turn parked in its process starts it, on Postgres; never for a batch
with an approval (an approved tool is a DBOS step, which runs only in its workflow), never on
SQLite (one writer at a time). ``BatchJobs.start`` says whether it started one.

And what a job a submit started does after its results commit: it starts the turn's next
model step where the turn would call the model next (not after a ``finish_with`` result,
and up to the last step ``max_steps`` allows), as the turn's own step, under the turn's slot
of that step; and the wait it adds to the turn's summary."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.agents import Agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import names
from helix_dbos.runtime._handover import BatchJobs
from helix_dbos.testing import capture_log_events
from tests.observability.obs_helpers import one_event
from tests.runtime.agents import EditIn, EditOut, batch_script, editor_agent
from tests.runtime.batch_job_products import job_products
from tests.runtime.conftest import MakeRuntime
from tests.support.asker import inside_recv
from tests.support.bank import Bank, banker, script


def _starts(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each ``BatchJobs.start`` (a submit that completed a batch) started a job."""
    started: list[bool] = []
    original = BatchJobs.start

    def start(jobs: BatchJobs, live_workflow_id: str, job_of: Callable[..., Any]) -> bool:
        did = original(jobs, live_workflow_id, job_of)
        started.append(did)
        return did

    monkeypatch.setattr(BatchJobs, "start", start)
    return started


async def test_a_submit_starts_the_job_of_a_client_batch_on_postgres_only(
    make_runtime: MakeRuntime, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same client batch: on Postgres the submit completing it starts its job; on SQLite
    the woken turn runs it."""
    started = _starts(monkeypatch)
    rt = await make_runtime([editor_agent()])
    handle = await rt.start("editor", "1 edit")
    [call] = await rt.wait_for_pending(handle.session_id)
    await inside_recv(rt, handle.workflow_id or "")
    await rt.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
    assert (await rt.wait(handle.session_id))["status"] == "completed"
    assert started == [rt.store.dialect == "postgresql"]


async def test_a_submit_starts_no_job_for_a_batch_with_an_approval(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An approval completes its batch: the turn, woken, runs the approved tool and the job."""
    started = _starts(monkeypatch)
    bank = Bank()
    rt = await make_runtime([banker(bank, ScriptedLLM(script))])
    handle = await rt.start("banker", "pay")
    [call] = await rt.wait_for_pending(handle.session_id)
    await inside_recv(rt, handle.workflow_id or "")
    await rt.submit_tool_result(
        handle.session_id,
        call["toolCallId"],
        kind="approval-response",
        approval_id=call["approvalId"],
        approved=True,
    )
    assert (await rt.wait(handle.session_id))["status"] == "completed"
    assert len(bank.runs) == 1
    assert started == [False]


class Verdict(BaseModel):
    text: str


def clerk_script(request: LLMRequest) -> LLMResponse:
    """The first step calls the client tool ``edit`` and the server tool ``conclude`` (which
    finishes the turn) in one batch; any later step replies."""
    if request.messages[-1].role == "user":
        return call(request, ("edit", {"text": "draft"}), ("conclude", {"text": "done"}))
    return reply("went on")


def clerk(llm: ScriptedLLM) -> Agent:
    return define_agent(
        "clerk",
        llm=llm,
        tools=[
            define_tool("edit", "Apply an edit", EditIn, EditOut, execute="client"),
            define_tool(
                "conclude",
                "File the verdict",
                Verdict,
                execute=lambda args: {"filed": args.text},
                finish_with=True,
            ),
        ],
    )


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
async def test_a_job_after_a_finish_with_result_calls_no_model(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of a client call and a successful ``finish_with`` call (run before the park):
    the job the submit started commits the results and starts no model step, as the turn
    ends with the call's output. The model is called once, for the first step only. (A step
    the job started would reach the model at once, its inputs handed on, and commit its reply
    as the turn's end: the turn would end ``stopped``, its output lost.)"""
    products = job_products(monkeypatch)
    llm = ScriptedLLM(clerk_script)
    rt = await make_runtime([clerk(llm)])
    handle = await rt.start("clerk", "file it")
    [pending] = await rt.wait_for_pending(handle.session_id)
    await inside_recv(rt, handle.workflow_id or "")
    await rt.submit_tool_result(handle.session_id, pending["toolCallId"], result={"applied": 1})
    outcome = await handle.result()
    assert (outcome["outcome"], outcome["output"]) == ("completed", {"filed": "done"})
    [job] = products
    assert job.next_step is None
    assert llm.calls == 1
    history = await rt.messages(handle.session_id)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool"]


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
async def test_the_job_of_the_step_before_the_last_starts_the_last(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``max_steps=2``: the batch of step 0 leaves one model step. The job the submit started
    starts it (step 1, as the model is told), not the woken turn; the turn ends completed."""
    products = job_products(monkeypatch)
    llm = ScriptedLLM(batch_script)
    agent = define_agent(
        "editor",
        llm=llm,
        tools=[define_tool("edit", "Apply an edit", EditIn, EditOut, execute="client")],
        max_steps=2,
    )
    rt = await make_runtime([agent])
    handle = await rt.start("editor", "1 edit")
    [pending] = await rt.wait_for_pending(handle.session_id)
    await inside_recv(rt, handle.workflow_id or "")
    await rt.submit_tool_result(handle.session_id, pending["toolCallId"], result={"applied": 1})
    outcome = await handle.result()
    assert outcome["outcome"] == "completed"
    [job] = products
    assert job.next_step is not None
    assert [request.step for request in llm.requests] == [0, 1]


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
async def test_the_jobs_model_step_is_filed_under_the_turns_slot_of_that_step(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model step a submit's job ran is the turn's step 1 of its continuation run: its
    checkpoint is keyed ``<workflow>:<run>:<step>:model`` (docs/client-tools.md), the durable
    name a replay of that step reads its recorded answer under, and ``checkpoints`` lists it
    as a model step. The model is told it is step 1."""
    products = job_products(monkeypatch)
    llm = ScriptedLLM(batch_script)
    rt = await make_runtime([editor_agent(llm=llm)])
    handle = await rt.start("editor", "1 edit")
    workflow_id, run_id = handle.workflow_id or "", handle.run_id
    [pending] = await rt.wait_for_pending(handle.session_id)
    await inside_recv(rt, workflow_id)
    await rt.submit_tool_result(handle.session_id, pending["toolCallId"], result={"applied": 1})
    assert (await handle.result())["outcome"] == "completed"
    [job] = products
    assert job.next_step is not None  # the submit's job ran the step, not the turn
    listed = [(c["checkpointId"], c["kind"]) for c in await rt.checkpoints(handle.session_id)]
    assert listed == [
        (names.turn_slot(workflow_id, names.next_run_id(run_id), 1, "model"), "model"),
        (names.turn_slot(workflow_id, run_id, 0, "results"), "results"),
        (names.turn_slot(workflow_id, run_id, 0, "model"), "model"),
    ]
    assert [request.step for request in llm.requests] == [0, 1]


def note_script(request: LLMRequest) -> LLMResponse:
    """The first step calls the server tool ``note``; the next one replies."""
    if request.messages[-1].role == "user":
        return call(request, ("note", {"text": "seen"}))
    return reply("noted")


async def test_a_batch_of_server_tools_adds_no_wait_to_the_turns_summary(
    make_runtime: MakeRuntime,
) -> None:
    """``waitMs`` of a turn's summary line counts the time client calls waited for their
    answers (``batch_job.wait_ms``, added by the batch's job and by the turn): a batch whose
    tools ran on the server waited for nothing, and adds nothing."""
    agent = define_agent(
        "noter",
        llm=ScriptedLLM(note_script),
        tools=[
            define_tool("note", "Take a note", Verdict, execute=lambda args: {"noted": args.text})
        ],
    )
    rt = await make_runtime([agent])
    with capture_log_events() as logged:
        handle = await rt.start("noter", "note it")
        assert (await handle.result())["outcome"] == "completed"
    summary = one_event(logged, "turn.summary", sessionId=handle.session_id)
    assert (summary["steps"], summary["clientCalls"], summary["waitMs"]) == (2, 0, 0)
