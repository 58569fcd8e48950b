"""Expiry with a meaning: ``define_tool(..., on_timeout=...)`` says what a lapsed deadline
gives the model, and an expired call is recorded and streamed as expired, distinct from a
denied and from an answered one (tool result, ``tool_end``, ``client_tool.timeout``, metrics).

One batch holds a call of each policy (an approval ``deny`` and ``approve``, a client tool with
a default result and one with the default ``error``), so one short wait covers them all.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from helix_dbos.core import DefaultResult, define_agent, define_tool
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime
from helix_dbos.testing import capture_log_events

#: Short, so the test waits little; long enough that a loaded machine parks all four first.
DEADLINE = 1.5
#: Each tool's expiry policy, as recorded.
POLICIES = {"deny_gate": "deny", "approve_gate": "approve", "ask_default": "result"}
POLICIES["ask_error"] = "error"


class Transfer(BaseModel):
    amount: int


class Question(BaseModel):
    text: str


class Answer(BaseModel):
    choice: str


class Bank:
    def __init__(self) -> None:
        self.runs: list[tuple[str, int]] = []

    def deny_gate(self, args: Transfer) -> dict[str, Any]:
        self.runs.append(("deny_gate", args.amount))
        return {"moved": args.amount}

    def approve_gate(self, args: Transfer) -> dict[str, Any]:
        self.runs.append(("approve_gate", args.amount))
        return {"moved": args.amount}


def script(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    if last.role == "user" and last.content == "all four":
        return call(
            request,
            ("deny_gate", {"amount": 1}),
            ("approve_gate", {"amount": 2}),
            ("ask_default", {"text": "which?"}),
            ("ask_error", {"text": "which?"}),
        )
    if last.role == "user" and last.content == "two answered":
        return call(request, ("deny_gate", {"amount": 3}), ("ask_error", {"text": "which?"}))
    return reply("done")


def agent(bank: Bank, deadline: float = DEADLINE) -> Any:
    return define_agent(
        "expiring",
        llm=ScriptedLLM(script),
        tools=[
            define_tool(
                "deny_gate",
                "Move money; a lapse denies",
                Transfer,
                execute=bank.deny_gate,
                require_approval=True,
                client_tool_timeout=deadline,
                on_timeout="deny",
            ),
            define_tool(
                "approve_gate",
                "Move money; a lapse approves",
                Transfer,
                execute=bank.approve_gate,
                require_approval=True,
                client_tool_timeout=deadline,
                on_timeout="approve",
            ),
            define_tool(
                "ask_default",
                "Ask the user; a lapse answers 'later'",
                Question,
                Answer,
                execute="client",
                client_tool_timeout=deadline,
                on_timeout=DefaultResult(Answer(choice="later")),
            ),
            define_tool(
                "ask_error",
                "Ask the user",
                Question,
                Answer,
                execute="client",
                client_tool_timeout=deadline,
            ),
        ],
    )


def waits(rt: AgentRuntime, tool: str, outcome: str) -> float:
    """How many waits of ``tool`` the live metrics counted with ``outcome``."""
    labels = {"tool": tool, "outcome": outcome}
    return rt.metrics.registry.get_sample_value("helix_tool_wait_seconds_count", labels) or 0.0


async def test_each_policy_gives_the_model_its_result_and_is_recorded_as_expired(
    make_runtime: Any,
) -> None:
    bank = Bank()
    rt = await make_runtime([agent(bank)])
    with capture_log_events() as logged:
        handle = await rt.start("expiring", "all four")
        sid = handle.session_id
        assert len(await rt.wait_for_pending(sid, count=4)) == 4
        assert (await rt.wait(sid, timeout=30))["status"] == "completed"

    tools = {m.tool_name: m for m in await rt.messages(sid) if m.role == "tool"}
    # deny: the model reads a denial whose reason says the approval expired; no run.
    denied = tools["deny_gate"]
    assert denied.is_error and denied.error_code == "approval_expired"
    assert "denied" in denied.content and "expired" in denied.content
    # approve: the fixed decision ran the tool once, with the call's arguments.
    assert bank.runs == [("approve_gate", 2)]
    assert not tools["approve_gate"].is_error and tools["approve_gate"].result == {"moved": 2}
    # A client tool's default result, as if the client had sent it.
    assert not tools["ask_default"].is_error and tools["ask_default"].result == {"choice": "later"}
    # The default policy is today's timeout.
    assert tools["ask_error"].is_error and tools["ask_error"].error_code == "client_tool_timeout"

    # Recorded as expired in the conversation too (a marker the model does not read).
    for name, tool in tools.items():
        assert tool.meta == {"expired": {"onTimeout": POLICIES[name]}}, name

    # Streamed as expired, with the policy applied.
    ends = {e.data["toolName"]: e.data for e in await rt.events(sid) if e.type == "tool_end"}
    policies = POLICIES
    for name, policy in policies.items():
        assert ends[name]["outcome"] == "expired", name
        assert ends[name]["onTimeout"] == policy, name
    assert ends["deny_gate"]["errorCode"] == "approval_expired"
    assert ends["approve_gate"]["output"] == {"moved": 2}
    assert ends["ask_default"]["output"] == {"choice": "later"}

    # Logged as client_tool.timeout with the policy, and counted as expired.
    timeouts = {e["toolName"]: e for e in logged if e["event"] == "client_tool.timeout"}
    assert {name: timeouts[name]["policy"] for name in policies} == policies
    for name in policies:
        assert waits(rt, name, "expired") == 1, name
        assert waits(rt, name, "denied") == 0 and waits(rt, name, "answered") == 0

    # Durably a timeout: a late answer is refused, and nothing is stored.
    state = await rt.session(sid)
    assert {t.outcome for t in state.completed.values()} == {"timeout"}
    gate = next(e.data for e in await rt.events(sid) if e.type == "tool_approval_request")
    late = await rt.submit_tool_result(
        sid,
        gate["toolCallId"],
        kind="approval-response",
        approval_id=gate["approvalId"],
        approved=True,
    )
    assert (late.status, late.reason) == ("unknown_tool_call", "deadline_lapsed")


async def test_denied_and_answered_calls_are_not_expired(make_runtime: Any) -> None:
    """A human's denial and a client's answer keep their own outcomes."""
    bank = Bank()
    rt = await make_runtime([agent(bank, deadline=60)])
    handle = await rt.start("expiring", "two answered")
    sid = handle.session_id
    pending = {p["toolName"]: p for p in await rt.wait_for_pending(sid, count=2)}
    gate = pending["deny_gate"]
    await rt.submit_tool_result(
        sid,
        gate["toolCallId"],
        kind="approval-response",
        approval_id=gate["approvalId"],
        approved=False,
        reason="no",
    )
    await rt.submit_tool_result(sid, pending["ask_error"]["toolCallId"], result={"choice": "a"})
    assert (await rt.wait(sid, timeout=30))["status"] == "completed"
    ends = {e.data["toolName"]: e.data for e in await rt.events(sid) if e.type == "tool_end"}
    assert ends["deny_gate"]["outcome"] == "denied" and "onTimeout" not in ends["deny_gate"]
    assert ends["deny_gate"]["errorCode"] == "approval_denied"
    assert ends["ask_error"]["outcome"] == "answered" and "onTimeout" not in ends["ask_error"]
    assert all(m.meta is None for m in await rt.messages(sid) if m.role == "tool")
    assert waits(rt, "deny_gate", "denied") == 1 and waits(rt, "deny_gate", "expired") == 0
    assert waits(rt, "ask_error", "answered") == 1 and waits(rt, "ask_error", "expired") == 0
    assert bank.runs == []
