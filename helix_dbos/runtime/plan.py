"""Classifying a model step's tool calls: what runs where, and what the turn parks on."""

from __future__ import annotations

from typing import cast

from pydantic import ValidationError

from ..core.agents import Agent
from ..core.messages import ToolCall
from .records import PlanItem, PlanKind

__all__ = ["SUSPENDING_KINDS", "plan_calls"]

#: Call kinds the turn parks on (the client answers, or a human approves).
SUSPENDING_KINDS = ("client", "approval")


def plan_calls(agent: Agent, calls: list[ToolCall]) -> list[PlanItem]:
    """Each call in the model's order, with its ``kind``: ``server``, ``client``, ``approval``,
    ``subagent``, or ``invalid`` (unknown tool or bad arguments: it never runs and the model
    gets a failed result). Suspending calls carry their deadline in ``timeoutSeconds``."""
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
    if tool.execution == "client":
        return {**item("client"), "timeoutSeconds": agent.deadline_seconds(tool)}
    if tool.require_approval:
        return {**item("approval"), "timeoutSeconds": agent.deadline_seconds(tool)}
    return item("server")
