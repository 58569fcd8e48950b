"""Classifying a model step's tool calls: what runs where, and what the turn parks on."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..core.agents import Agent
from ..core.messages import ToolCall

__all__ = ["SUSPENDING_KINDS", "plan_calls"]

#: Call kinds the turn parks on (the client answers, or a human approves).
SUSPENDING_KINDS = ("client", "approval")


def plan_calls(agent: Agent, calls: list[ToolCall]) -> list[dict[str, Any]]:
    """Each call in the model's order, with its ``kind``: ``server``, ``client``, ``approval``,
    ``subagent``, or ``invalid`` (unknown tool or bad arguments: it never runs and the model
    gets a failed result). Suspending calls carry their deadline in ``timeoutSeconds``."""
    plan: list[dict[str, Any]] = []
    for index, call in enumerate(calls):
        item: dict[str, Any] = {
            "toolCallId": call.id,
            "toolName": call.name,
            "input": call.input,
            "index": index,
        }
        tool = agent.tool(call.name)
        if tool is None:
            item.update(kind="invalid", error=f"Unknown tool {call.name!r}")
        else:
            try:
                tool.input_model.model_validate(call.input)
            except ValidationError as exc:
                item.update(
                    kind="invalid",
                    error=f"Invalid arguments for {call.name!r}: "
                    f"{exc.errors(include_url=False, include_context=False)}",
                )
            else:
                if tool.execution == "subagent":
                    item.update(kind="subagent", subagent=tool.subagent)
                elif tool.execution == "client":
                    item.update(kind="client", timeoutSeconds=agent.deadline_seconds(tool))
                elif tool.require_approval:
                    item.update(kind="approval", timeoutSeconds=agent.deadline_seconds(tool))
                else:
                    item.update(kind="server")
        plan.append(item)
    return plan
