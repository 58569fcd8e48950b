"""Turning one suspended call's stored answer (or its absence) into its tool result.

Pure: the same entry always resolves the same way, so it can run inside a transaction that
may be retried, or in the workflow body.
"""

from __future__ import annotations

from typing import Any

__all__ = ["resolve_call"]


def resolve_call(
    item: dict[str, Any], entry: dict[str, Any] | None, abandon: bool
) -> dict[str, Any]:
    """The result of a suspended call from its stored pending entry (camelCase JSON).

    Returns a result dict (``ok``, ``result`` | ``error`` + ``errorCode``, ``outcome``,
    ``waitMs``). An approved approval returns ``runInput``: the caller runs the tool with it.
    """
    base: dict[str, Any] = {
        "toolCallId": item["toolCallId"],
        "toolName": item["toolName"],
        "suspended": True,
    }
    if entry is None:
        return {
            **base,
            "ok": False,
            "errorCode": "not_executed",
            "outcome": "not_executed",
            "waitMs": 0,
        }
    base["deadlineAt"] = entry["deadlineAt"]
    submitted = entry.get("submittedAt")
    if submitted is None:
        # No answer: a new message abandoned it, or its deadline lapsed (a timeout is never a
        # denial, even for an approval).
        if abandon:
            return {
                **base,
                "ok": False,
                "outcome": "abandoned",
                "errorCode": "client_tool_abandoned",
                "waitMs": 0,
            }
        return {
            **base,
            "ok": False,
            "outcome": "timeout",
            "errorCode": "client_tool_timeout",
            "waitMs": entry["deadlineAt"] - entry["registeredAt"],
        }
    base.update(outcome="answered", waitMs=submitted - entry["registeredAt"])
    response = entry.get("response") or {}
    if entry["kind"] == "client":
        if "error" in response:
            return {**base, "ok": False, "error": response["error"], "errorCode": None}
        return {**base, "ok": True, "result": response.get("result")}
    if not response.get("approved"):
        reason = response.get("reason")
        text = "A human denied this call." + (f" Reason: {reason}" if reason else "")
        return {**base, "ok": False, "error": text, "errorCode": "approval_denied"}
    # An edit of ``{}`` is an edit (every field defaulted), not "no edit".
    return {
        **base,
        "runInput": response["editedInput"] if "editedInput" in response else entry["input"],
    }
