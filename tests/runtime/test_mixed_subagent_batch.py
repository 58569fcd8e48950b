"""A model step that calls a sub-agent and a client tool at once: the sub-agent runs while the
client call waits, and the turn goes on with both results. On Postgres and SQLite, hot and
hibernated.

The step's commit registers the client call (the parent's row is then
``suspended_client_tool``) before the sub-agent starts; the sub-agent's start is fenced on its
parent's run, and such a parent is live. Before this was so, the sub-agent's start was
refused, the turn's workflow ended at once and the session waited for its client call until
the reconciler ended it ``framework_turn_lost``.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime, names
from helix_dbos.runtime._hibernated import continuation, keeper
from helix_dbos.runtime.records import NEVER_DUE
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import (
    LONG_TIMEOUT,
    agent,
    continuations,
    edit_tool,
    hibernated,
    wait_until,
)


def _both(request: LLMRequest) -> LLMResponse:
    """A user message calls the sub-agent ``cold`` and the client tool ``edit`` in one step;
    then replies with the results it saw."""
    if request.messages[-1].role == "user":
        return call(request, ("subagent__cold", {"message": "1 edit"}), ("edit", {"text": "t"}))
    seen = sorted(m.content for m in request.messages if m.role == "tool")
    return reply("saw " + " | ".join(seen))


@pytest.mark.parametrize("hibernate_after", ["never", 0], ids=["hot", "hibernated"])
async def test_a_step_calling_a_sub_agent_and_a_client_tool_goes_on_with_both(
    make_runtime: MakeRuntime, hibernate_after: Any
) -> None:
    cold = agent("cold", hibernate_after=hibernate_after)
    parent = define_agent(
        "parent",
        llm=ScriptedLLM(_both),
        tools=[edit_tool(LONG_TIMEOUT)],
        subagents=[cold],
        hibernate_after=hibernate_after,
    )
    rt = await make_runtime([parent, cold])
    handle = await rt.start("parent", "go")
    pending = await rt.wait_for_pending(handle.session_id, 2)
    owners = {p["ownerSessionId"] for p in pending}
    # The parent's own call and the sub-agent's, both routed through the root.
    assert handle.session_id in owners and len(owners) == 2
    for n, p in enumerate(pending):
        answer = await rt.submit_tool_result(
            handle.session_id, p["toolCallId"], result={"applied": n + 1}
        )
        assert answer.status == "accepted"
    done = await rt.wait(handle.session_id)
    assert done["status"] == "completed", done
    assert done["pendingToolCalls"] == []


def _both_and_two(request: LLMRequest) -> LLMResponse:
    """``_both``, with two client calls of the parent's own beside the sub-agent's."""
    if request.messages[-1].role == "user":
        return call(
            request,
            ("subagent__cold", {"message": "1 edit"}),
            ("edit", {"text": "a"}),
            ("edit", {"text": "b"}),
        )
    return _both(request)


async def _hibernated_mixed(
    make_runtime: MakeRuntime, script: Any
) -> tuple[AgentRuntime, Any, dict[str, str]]:
    """A hibernating ``parent`` whose step called ``cold`` and its own client calls, once the
    parent hibernated on its sub-agent (the keeper off): the runtime, the handle, and each
    pending call's owner."""
    cold = agent("cold")
    parent = define_agent(
        "parent", llm=ScriptedLLM(script), tools=[edit_tool(LONG_TIMEOUT)], subagents=[cold]
    )
    rt = await make_runtime([parent, cold], hibernate_after_seconds=0, deadline_keeper_seconds=0)
    handle = await rt.start("parent", "go")
    count = 3 if script is _both_and_two else 2
    pending = await rt.wait_for_pending(handle.session_id, count)
    mark = await hibernated(rt, handle.session_id)
    assert mark["dueAt"] == NEVER_DUE
    return rt, handle, {p["toolCallId"]: p["ownerSessionId"] for p in pending}


async def test_an_answer_to_the_parents_own_call_leaves_it_waiting_on_its_sub_agent(
    make_runtime: MakeRuntime,
) -> None:
    """The parent hibernated on its sub-agent; the answer to its own client call completes
    its own batch, but the turn goes on only when the sub-agent ends: the mark stays never
    due and no continuation starts (it would take up a sub-agent's end not yet reported)."""
    rt, handle, owners = await _hibernated_mixed(make_runtime, _both)
    [own] = [c for c, o in owners.items() if o == handle.session_id]
    [theirs] = [c for c, o in owners.items() if o != handle.session_id]
    answer = await rt.submit_tool_result(handle.session_id, own, result={"applied": 1})
    assert answer.status == "accepted" and not answer.continued_here
    assert (await rt.store.get(handle.session_id)).metadata["hibernated"]["dueAt"] == NEVER_DUE
    assert await continuations(handle.session_id) == []
    await rt.submit_tool_result(handle.session_id, theirs, result={"applied": 2})
    done = await rt.wait(handle.session_id)
    assert done["status"] == "completed", done
    assert len(await continuations(handle.session_id)) == 1


async def test_a_parent_due_after_its_sub_agents_end_stays_due_whatever_its_own_answers(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sub-agent ended and made its parent due, but the parent's continuation did not
    start (as a start that failed). An answer to one of the parent's two own calls then must
    not move its due time to the other's deadline: the turn is due now, for the keeper."""
    rt, handle, owners = await _hibernated_mixed(make_runtime, _both_and_two)
    own = [c for c, o in owners.items() if o == handle.session_id]
    [theirs] = [c for c, o in owners.items() if o != handle.session_id]
    real = continuation.start_continuation

    async def not_the_parents(ctx: Any, state: Any) -> Any:
        return None if state.session_id == handle.session_id else await real(ctx, state)

    monkeypatch.setattr(continuation, "start_continuation", not_the_parents)
    await rt.submit_tool_result(handle.session_id, theirs, result={"applied": 1})

    async def due() -> bool:
        mark = (await rt.store.get(handle.session_id)).metadata["hibernated"]
        return bool(mark["dueAt"] == 0)

    assert await wait_until(due)
    theirs_ended = (await rt.store.get(handle.session_id)).metadata["childEnds"]
    await rt.submit_tool_result(handle.session_id, own[0], result={"applied": 2})
    assert await due()
    monkeypatch.setattr(continuation, "start_continuation", real)
    assert await keeper.keep_once(rt.ctx) == 1
    await rt.wait_for_pending(handle.session_id)  # the continuation parked on the other call
    await rt.submit_tool_result(handle.session_id, own[1], result={"applied": 3})
    done = await rt.wait(handle.session_id)
    assert done["status"] == "completed", done
    # One continuation took the sub-agent's end; the batch of its own calls, parked after
    # it, may have hibernated again and been continued too (or drained live, if the last
    # answer came first).
    ids = [w.workflow_id for w in await continuations(handle.session_id)]
    child_call = next(iter(theirs_ended))
    assert (
        ids.count(names.continuation_workflow_id(handle.session_id, handle.run_id, child_call)) == 1
    )


class Query(BaseModel):
    key: str


def _delegate_then_look_up(request: LLMRequest) -> LLMResponse:
    """A user message calls the sub-agent ``cold`` and then the server tool ``lookup`` in one
    step; then replies with the results it saw, in order."""
    if request.messages[-1].role == "user":
        return call(request, ("subagent__cold", {"message": "1 edit"}), ("lookup", {"key": "k"}))
    return reply(" | ".join(m.content for m in request.messages if m.role == "tool"))


async def test_a_call_after_a_hibernated_sub_agent_runs_with_its_input_once_it_ends(
    make_runtime: MakeRuntime,
) -> None:
    """The step's calls run in order: the parent hibernates on its sub-agent before it reaches
    ``lookup``, so the hibernate record keeps that call's input (rule 19 drops only the inputs
    nothing reads again), and the parent's continuation runs it, once, with its input."""
    lookups: list[str] = []

    def lookup(args: Query) -> dict[str, Any]:
        lookups.append(args.key)
        return {"value": 7}

    cold = agent("cold")
    parent = define_agent(
        "parent",
        llm=ScriptedLLM(_delegate_then_look_up),
        tools=[define_tool("lookup", "Look up", Query, execute=lookup)],
        subagents=[cold],
    )
    rt = await make_runtime([parent, cold], hibernate_after_seconds=0)
    handle = await rt.start("parent", "go")
    [pending] = await rt.wait_for_pending(handle.session_id)
    mark = await hibernated(rt, handle.session_id)
    slot = names.hibernate_slot(mark["workflowId"], handle.run_id, mark["step"], mark["child"])
    recorded = await rt.store.get_checkpoint(slot)
    assert recorded is not None
    plan = {item["toolName"]: item for item in recorded["state"]["result"]["plan"]}
    assert plan["lookup"]["input"] == {"key": "k"} and lookups == []
    await rt.submit_tool_result(handle.session_id, pending["toolCallId"], result={"applied": 1})
    done = await rt.wait(handle.session_id)
    assert done["status"] == "completed", done
    assert lookups == ["k"]
    history = await rt.messages(handle.session_id)
    assert history[-1].content.endswith(' | {"value": 7}')
