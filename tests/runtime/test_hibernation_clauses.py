"""Clauses of rules 21, 22 and 23 (ARCHITECTURE.md) that the hibernation tests left unread:
when a hibernated batch falls due after a partial answer, and what the hibernate commit's
mark records (on Postgres and SQLite); what a hibernate commit fenced off by the submit's
job does (on Postgres, where a submit runs the job)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dbos import DBOS
from pydantic import BaseModel

from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.agents import Agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime, names
from helix_dbos.runtime.records import FENCED_KEY
from tests.runtime.batch_job_products import job_products
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import (
    EditIn,
    EditOut,
    Query,
    agent,
    completed,
    hibernated,
    mixed_script,
    script,
    wait_until,
)
from tests.support.asker import inside_recv

SHORT = 300.0
LONG = 600.0


class Slow(BaseModel):
    text: str


def pair_script(request: LLMRequest) -> LLMResponse:
    """A user message calls ``edit`` (which waits ``SHORT``) and ``slow`` (``LONG``) in one
    step; then replies with their results."""
    if request.messages[-1].role == "user":
        return call(request, ("edit", {"text": "a"}), ("slow", {"text": "b"}))
    seen = [m for m in request.messages if m.role == "tool"]
    return reply("results: " + " | ".join(m.error_code or m.content for m in seen))


def pair_agent() -> Agent:
    """Hibernates at once; its two client tools wait different times."""
    return define_agent(
        "pair",
        llm=ScriptedLLM(pair_script),
        instructions="Edit documents.",
        tools=[
            define_tool(
                "edit", "Edit", EditIn, EditOut, execute="client", client_tool_timeout=SHORT
            ),
            define_tool("slow", "Slow", Slow, EditOut, execute="client", client_tool_timeout=LONG),
        ],
        hibernate_after=0,
    )


async def _mark(runtime: AgentRuntime, session_id: str) -> Any:
    return (await runtime.store.get(session_id)).metadata.get("hibernated")


async def test_a_partial_answer_makes_a_hibernated_batch_due_at_its_last_unanswered_deadline(
    make_runtime: MakeRuntime,
) -> None:
    """Rule 22 (``hibernation.on_answer``, ``due_at``): the hibernate commit marks the batch
    due at its last deadline; an answer to the call with the later deadline moves it to the
    other call's deadline (not now: the keeper would continue a batch still waiting, and not
    left at the answered call's). The keeper is off: only the submits move the mark."""
    runtime = await make_runtime([pair_agent()], deadline_keeper_seconds=0, heal_interval_seconds=0)
    handle = await runtime.start("pair", "go")
    sid = handle.session_id
    mark = await hibernated(runtime, sid)
    state = await runtime.store.get(sid)
    by_name = {p.tool_name: p for p in state.pending.values()}
    edit, slow = by_name["edit"], by_name["slow"]
    assert edit.deadline_at < slow.deadline_at
    assert mark["dueAt"] == slow.deadline_at
    assert mark["workflowId"] == handle.workflow_id and mark["step"] == 0
    assert mark["at"] >= edit.registered_at  # when it hibernated: after its calls parked

    answer = await runtime.submit_tool_result(sid, slow.tool_call_id, result={"applied": 2})
    assert answer.status == "accepted"
    assert answer.continuation is not None and answer.continuation.kind == "awaiting_batch"
    assert (await _mark(runtime, sid))["dueAt"] == edit.deadline_at

    answer = await runtime.submit_tool_result(sid, edit.tool_call_id, result={"applied": 1})
    assert answer.continuation is not None and answer.continuation.kind == "new_run"
    outcome = await completed(runtime, handle)
    assert outcome["text"] == 'results: {"applied": 1} | {"applied": 2}'
    assert await _mark(runtime, sid) is None


async def test_the_hibernate_record_keeps_no_input_it_need_not(make_runtime: MakeRuntime) -> None:
    """Rule 19 (``hibernation._without_input``): the record of a batch holds the step's plan
    without the inputs nothing reads again, that of a suspended call (its pending entry holds
    it) and that of a call that ran (its result is recorded). A call not run yet keeps its
    input: ``test_mixed_subagent_batch.py``."""
    tools = [
        define_tool("edit", "Edit", EditIn, EditOut, execute="client", client_tool_timeout=LONG),
        define_tool("lookup", "Look up", Query, execute=lambda args: {"value": 7}),
    ]
    mixed = define_agent("mixed", llm=ScriptedLLM(mixed_script), tools=tools, hibernate_after=0)
    runtime = await make_runtime([mixed], deadline_keeper_seconds=0)
    handle = await runtime.start("mixed", "go")
    mark = await hibernated(runtime, handle.session_id)
    slot = names.hibernate_slot(mark["workflowId"], handle.run_id, mark["step"], None)
    recorded = await runtime.store.get_checkpoint(slot)
    assert recorded is not None
    plan = recorded["state"]["result"]["plan"]
    assert sorted(item["toolName"] for item in plan) == ["edit", "edit", "lookup"]
    assert [item for item in plan if "input" in item] == []
    state = await runtime.store.get(handle.session_id)
    [pending] = state.pending.values()
    assert pending.input == {"text": "t"}  # the suspended call's input, where it is read
    # Filed under its run, as every checkpoint of the turn (``GET /checkpoints`` shows it).
    listed = {c["checkpointId"]: c for c in await runtime.checkpoints(handle.session_id)}
    assert listed[slot]["runId"] == handle.run_id
    await runtime.interrupt(handle.session_id)


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
async def test_a_window_ending_after_the_submits_job_committed_goes_on_live(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 22 (``hibernation.hibernate``, its fenced path): the batch's answer lands while
    the turn is parked in its hot window, and the job the submit started commits the results
    (the session moves to the next run); then the window ends before the turn took its
    wake-up. The hibernate commit is fenced off by that run, finds the results recorded under
    the batch's slot, and the turn goes on live with them, as if woken: it joins the job and
    ends completed, with no hibernation mark and one model call per step."""
    products = job_products(monkeypatch)
    llm = ScriptedLLM(script)
    runtime = await make_runtime([agent("warm", llm, hibernate_after=LONG)])
    real = DBOS.recv_async
    held: list[str | None] = []
    committed = asyncio.Event()

    async def window_ends_late(topic: str | None, timeout_seconds: float = 60) -> Any:
        if runtime.ctx.parked and not held:  # the park's first wait, not a later one
            held.append(topic)
            await committed.wait()
            return None  # the window's end, before the answer's wake-up is taken
        return await real(topic, timeout_seconds=timeout_seconds)

    monkeypatch.setattr(DBOS, "recv_async", window_ends_late)
    handle = await runtime.start("warm", "1 edit")
    sid = handle.session_id
    [pending] = await runtime.wait_for_pending(sid)
    await inside_recv(runtime, handle.workflow_id or "")
    answer = await runtime.submit_tool_result(sid, pending["toolCallId"], result={"applied": 1})
    assert answer.status == "accepted"

    async def job_done() -> bool:
        return bool(products)

    assert await wait_until(job_done), "the submit started no job"
    assert FENCED_KEY not in products[0].settled  # the results committed: the run moved on
    committed.set()
    outcome = await completed(runtime, handle)
    assert outcome["text"] == 'results: {"applied": 1}'
    assert await _mark(runtime, sid) is None
    assert llm.calls == 2
    assert [m.role for m in await runtime.messages(sid)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
