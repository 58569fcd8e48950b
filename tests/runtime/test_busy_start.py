"""A start on a parked session says what the turn waits for, and ``status`` tells the waits
apart (``waitingFor``).

A parked turn ends only when someone acts (an answer, an interrupt, a message that abandons the
calls), so ``start`` over it is refused ``state_already_running`` NOT retryable, naming the
calls and what to do. A turn that is running, or whose calls are all answered, ends on its own:
that refusal stays retryable.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from helix_dbos.core.agents import Agent, define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.tools import define_tool
from helix_dbos.errors import AgentAlreadyRunningError
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime

from .conftest import MakeRuntime


class Transfer(BaseModel):
    amount: int
    to: str


class Ask(BaseModel):
    question: str


class Answer(BaseModel):
    answer: str


def script(request: LLMRequest) -> LLMResponse:
    """'pay' parks on an approval, 'ask' on a client tool, 'both' on one of each."""
    last = request.messages[-1]
    if last.role != "user":
        return reply("done")
    calls: dict[str, list[tuple[str, dict[str, Any]]]] = {
        "pay": [("transfer", {"amount": 40, "to": "alice"})],
        "ask": [("askUser", {"question": "which?"})],
        "both": [("askUser", {"question": "which?"}), ("transfer", {"amount": 1, "to": "bob"})],
    }
    return call(request, *calls[last.content])


def transfer(args: Transfer) -> dict[str, Any]:
    return {"sent": args.amount}


def banker() -> Agent:
    return define_agent(
        "banker",
        llm=ScriptedLLM(script),
        tools=[
            define_tool(
                "transfer", "Move money", Transfer, execute=transfer, require_approval=True
            ),
            define_tool("askUser", "Ask the user", Ask, Answer, execute="client"),
        ],
    )


async def parked(rt: AgentRuntime, message: str, calls: int) -> tuple[str, list[dict[str, Any]]]:
    turn = await rt.start("banker", message)
    pending = await rt.wait_for_pending(turn.session_id, count=calls)
    return turn.session_id, pending


async def refusal(rt: AgentRuntime, session_id: str) -> AgentAlreadyRunningError:
    with pytest.raises(AgentAlreadyRunningError) as caught:
        await rt.start("banker", "again", session_id=session_id)
    return caught.value


async def test_start_over_an_approval_is_not_retryable_and_names_it(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime([banker()])
    sid, (pending,) = await parked(rt, "pay", 1)
    view = await rt.status(sid)
    assert view["status"] == "suspended_client_tool"
    assert view["waitingFor"] == ["approval"]
    err = await refusal(rt, sid)
    assert err.code == "state_already_running" and err.retryable is False
    body = err.to_body()
    assert body["retryable"] is False
    assert body["waitingFor"] == ["approval"]
    assert body["awaitedToolCallIds"] == [pending["toolCallId"]]
    assert "waiting for an approval of transfer" in err.message
    assert pending["toolCallId"] in err.message
    assert "interrupt" in err.message and "abandonPending" in err.message
    assert "suspended_client_tool" not in err.message


async def test_start_over_a_client_call_names_the_client_tool(make_runtime: MakeRuntime) -> None:
    rt = await make_runtime([banker()])
    sid, (pending,) = await parked(rt, "ask", 1)
    assert (await rt.status(sid))["waitingFor"] == ["client_tool"]
    err = await refusal(rt, sid)
    assert err.retryable is False and err.details["waitingFor"] == ["client_tool"]
    assert f"waiting for the client tool askUser (call {pending['toolCallId']})" in err.message


async def test_a_mixed_batch_waits_for_both_until_each_is_answered(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime([banker()])
    sid, pending = await parked(rt, "both", 2)
    assert (await rt.status(sid))["waitingFor"] == ["approval", "client_tool"]
    assert (await refusal(rt, sid)).details["waitingFor"] == ["approval", "client_tool"]
    ask = next(p for p in pending if p["toolName"] == "askUser")
    await rt.submit_tool_result(sid, ask["toolCallId"], result={"answer": "that one"})
    view = await rt.status(sid)
    assert view["waitingFor"] == ["approval"], view
    approval = next(p for p in pending if p["toolName"] == "transfer")
    await rt.submit_tool_result(
        sid,
        approval["toolCallId"],
        kind="approval-response",
        approval_id=approval["approvalId"],
        approved=True,
    )
    done = await rt.wait(sid)
    assert done["status"] == "completed" and done["waitingFor"] == []
    # The turn has ended: the same start now runs.
    await rt.start("banker", "ask", session_id=sid)


def helper_script(request: LLMRequest) -> LLMResponse:
    if request.messages[-1].role == "user":
        return call(request, ("askUser", {"question": "which?"}))
    return reply("found")


def lead_script(request: LLMRequest) -> LLMResponse:
    if request.messages[-1].role == "user":
        return call(request, ("subagent__helper", {"message": "ask them"}))
    return reply("done")


async def test_start_over_a_sub_agents_call_names_it(make_runtime: MakeRuntime) -> None:
    helper = define_agent(
        "helper",
        llm=ScriptedLLM(helper_script),
        tools=[define_tool("askUser", "Ask the user", Ask, Answer, execute="client")],
    )
    lead = define_agent("lead", llm=ScriptedLLM(lead_script), subagents=[helper])
    rt = await make_runtime([lead])
    turn = await rt.start("lead", "go")
    (pending,) = await rt.wait_for_pending(turn.session_id)
    assert (await rt.status(turn.session_id))["waitingFor"] == ["client_tool"]
    with pytest.raises(AgentAlreadyRunningError) as caught:
        await rt.start("lead", "again", session_id=turn.session_id)
    err = caught.value
    assert err.retryable is False
    assert err.details["awaitedToolCallIds"] == [pending["toolCallId"]]
    assert f"{pending['toolCallId']} of {pending['ownerSessionId']}" in err.message
