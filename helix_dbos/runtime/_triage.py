"""Classifying a model step's tool calls: what runs where, and what the turn parks on."""

from __future__ import annotations

from typing import cast

from pydantic import ValidationError

from ..core.agents import Agent
from ..core.messages import ToolCall
from ..core.tools import Tool
from .records import PlanItem, PlanKind

__all__ = ["SUSPENDING_KINDS", "plan_calls", "waits"]

#: Call kinds the turn parks on (the client answers, or a human approves).
SUSPENDING_KINDS = ("client", "approval")


def plan_calls(agent: Agent, calls: list[ToolCall]) -> list[PlanItem]:
    """Each call in the model's order, with its ``kind``: ``server``, ``client``, ``approval``,
    ``subagent``, or ``invalid`` (unknown tool or bad arguments: it never runs and the model
    gets a failed result). Suspending calls carry their deadline in ``timeoutSeconds``, and their
    tool's ``onTimeout`` and ``remindBefore`` when it has them."""
    return [_plan_call(agent, index, call) for index, call in enumerate(calls)]


def _plan_call(agent: Agent, index: int, call: ToolCall) -> PlanItem:
    def item(kind: PlanKind) -> PlanItem:
        return {
            "toolCallId": call.id,
            "toolName": call.name,
            "input": call.input,
            "index": index,
            "kind": kind,
        }

    tool = agent.tool(call.name)
    if tool is None:
        return {**item("invalid"), "error": f"Unknown tool {call.name!r}"}
    try:
        tool.input_model.model_validate(call.input)
    except ValidationError as exc:
        return {
            **item("invalid"),
            "error": f"Invalid arguments for {call.name!r}: "
            f"{exc.errors(include_url=False, include_context=False)}",
        }
    if tool.execution == "subagent":
        # ``subagent_tool`` always names the child's agent type.
        return {**item("subagent"), "subagent": cast(str, tool.subagent)}
    if tool.execution == "companion":
        return item("companion")
    if tool.execution == "client":
        return waits(item("client"), agent, tool)
    if tool.require_approval:
        return waits(item("approval"), agent, tool)
    return item("server")


def waits(item: PlanItem, agent: Agent, tool: Tool) -> PlanItem:
    """A suspending call with its deadline, and its tool's expiry policy and reminder when it
    has them (recorded with the plan: the park registers them from here)."""
    item["timeoutSeconds"] = agent.deadline_seconds(tool)
    if tool.on_timeout is not None:
        item["onTimeout"] = tool.on_timeout
    if tool.remind_before is not None:
        item["remindBefore"] = tool.remind_before
    if tool.approval_policy is not None:
        item["approvalPolicy"] = tool.approval_policy
    return item
