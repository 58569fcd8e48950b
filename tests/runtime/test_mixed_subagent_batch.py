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

from helix_dbos.core import define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import LONG_TIMEOUT, agent, edit_tool


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
