"""Clauses of rules 21, 22 and 23 (ARCHITECTURE.md) that the hibernation tests left unread:
when a hibernated batch falls due after a partial answer, and what the hibernate commit's
mark records. On Postgres and SQLite."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.agents import Agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime, names
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import (
    EditIn,
    EditOut,
    Query,
    completed,
    hibernated,
    mixed_script,
)

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
