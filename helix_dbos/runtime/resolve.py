"""Turning one suspended call's stored answer (or its absence) into its tool result.

Pure: the same entry always resolves the same way, so it can run inside a transaction that
may be retried, or in the workflow body.
"""

from __future__ import annotations

from typing import Any, cast

from .records import ToolCallRef, ToolResult

__all__ = ["resolve_call"]


def resolve_call(item: ToolCallRef, entry: dict[str, Any] | None, abandon: bool) -> ToolResult:
    """The result of a suspended call from its stored pending entry (camelCase JSON).

    Returns a result (``ok``, ``result`` | ``error`` + ``errorCode``, ``outcome``,
    ``waitMs``). An approved approval returns ``runInput`` (and no ``ok`` yet): the caller
    runs the tool with it, and the tool's result completes this one.
    """
    tcid, name = item["toolCallId"], item["toolName"]
    if entry is None:
        return {
            "toolCallId": tcid,
            "toolName": name,
            "suspended": True,
            "ok": False,
            "errorCode": "not_executed",
            "outcome": "not_executed",
            "waitMs": 0,
        }
    deadline: int = entry["deadlineAt"]
    submitted = entry.get("submittedAt")
    if submitted is None:
        # No answer: a new message abandoned it, or its deadline lapsed (a timeout is never a
        # denial, even for an approval).
        if abandon:
            return {
                "toolCallId": tcid,
                "toolName": name,
                "suspended": True,
                "deadlineAt": deadline,
                "ok": False,
                "outcome": "abandoned",
                "errorCode": "client_tool_abandoned",
                "waitMs": 0,
            }
        return {
            "toolCallId": tcid,
            "toolName": name,
            "suspended": True,
            "deadlineAt": deadline,
            "ok": False,
            "outcome": "timeout",
            "errorCode": "client_tool_timeout",
            "waitMs": deadline - entry["registeredAt"],
        }
    wait_ms: int = submitted - entry["registeredAt"]
    response = entry.get("response") or {}

    if entry["kind"] == "client":
        if "error" in response:
            return {
                "toolCallId": tcid,
                "toolName": name,
                "suspended": True,
                "deadlineAt": deadline,
                "outcome": "answered",
                "waitMs": wait_ms,
                "ok": False,
                "error": response["error"],
                "errorCode": None,
            }
        return {
            "toolCallId": tcid,
            "toolName": name,
            "suspended": True,
            "deadlineAt": deadline,
            "outcome": "answered",
            "waitMs": wait_ms,
            "ok": True,
            "result": response.get("result"),
        }
    if not response.get("approved"):
        reason = response.get("reason")
        return {
            "toolCallId": tcid,
            "toolName": name,
            "suspended": True,
            "deadlineAt": deadline,
            "outcome": "answered",
            "waitMs": wait_ms,
            "ok": False,
            "error": "A human denied this call." + (f" Reason: {reason}" if reason else ""),
            "errorCode": "approval_denied",
        }
    # An edit of ``{}`` is an edit (every field defaulted), not "no edit". No ``ok`` yet: it is
    # the tool's to say (``turn._resolve`` completes this result with the tool's own).
    approved = {
        "toolCallId": tcid,
        "toolName": name,
        "suspended": True,
        "deadlineAt": deadline,
        "outcome": "answered",
        "waitMs": wait_ms,
        "runInput": response["editedInput"] if "editedInput" in response else entry["input"],
    }
    return cast("ToolResult", approved)
