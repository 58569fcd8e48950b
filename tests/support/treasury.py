"""The ``treasurer`` agent: one approval tool per policy the tests exercise, named by the user's
message (its arguments are always ``bank.ARGS``), running a ``Bank``; and ``finance``, a
decider of the finance role (or of the roles given)."""

from __future__ import annotations

from typing import Any

from helix_dbos.core.agents import define_agent
from helix_dbos.core.approval_policy import ApprovalPolicy, Decider
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.tools import define_tool
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from tests.support.bank import ARGS, Bank, Transfer

#: The tools the treasurer calls, by the user's message.
POLICIES: dict[str, dict[str, Any]] = {
    "four_eyes": {"approval_policy": ApprovalPolicy(four_eyes=True)},
    "two_of_three": {
        "approval_policy": ApprovalPolicy(four_eyes=True, quorum=2, roles=("finance",))
    },
    "escalating": {
        "approval_policy": ApprovalPolicy(
            roles=("finance",), escalate_after=1.5, escalate_to=("cfo",)
        ),
        "client_tool_timeout": 60,
    },
    "lapse_deny": {
        "approval_policy": ApprovalPolicy(quorum=2),
        "client_tool_timeout": 2.5,
        "on_timeout": "deny",
    },
    "lapse_approve": {
        "approval_policy": ApprovalPolicy(quorum=2),
        "client_tool_timeout": 2.5,
        "on_timeout": "approve",
    },
    "lapse_error": {"approval_policy": ApprovalPolicy(quorum=2), "client_tool_timeout": 2.5},
}


def treasurer_script(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    if last.role == "user":
        return call(request, (last.content, ARGS))
    return reply(f"{last.error_code or 'ok'}: {last.content}")


def treasurer(bank: Bank) -> Any:
    tools = [
        define_tool(name, "Move money", Transfer, execute=bank.transfer, require_approval=True, **o)
        for name, o in POLICIES.items()
    ]
    return define_agent("treasurer", llm=ScriptedLLM(treasurer_script), tools=tools)


def finance(name: str, *roles: str) -> Decider:
    return Decider(principal=name, tenant="acme", credential="hook", roles=roles or ("finance",))
