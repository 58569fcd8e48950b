"""Every tool call in a conversation needs its result: the calls left without one, and the
``not_executed`` results that pair them.

A turn that was stopped (an interrupt, a crash, a retry or rewind to a checkpoint inside a
batch) can leave an assistant message's tool calls without results; every provider rejects
such a conversation. The runtime pairs them before the next model call reads it.
"""

from __future__ import annotations

from .humanize import humanize_client_tool_error
from .messages import Message

__all__ = ["not_executed_results", "unpaired_tool_calls"]


def unpaired_tool_calls(history: list[Message]) -> list[tuple[str, str]]:
    """``(tool_call_id, tool_name)`` of every tool_use without a tool_result, in order."""
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    return [
        (call.id, call.name)
        for m in history
        if m.role == "assistant"
        for call in m.tool_calls
        if call.id not in answered
    ]


def not_executed_results(history: list[Message]) -> list[Message]:
    """A failed ``not_executed`` tool result for each call of ``history`` that has none, in
    the calls' order, with the text the model reads for it (``humanize``)."""
    return [
        Message(
            role="tool",
            tool_call_id=tcid,
            tool_name=name,
            is_error=True,
            error_code="not_executed",
            content=humanize_client_tool_error("not_executed", name),
        )
        for tcid, name in unpaired_tool_calls(history)
    ]
