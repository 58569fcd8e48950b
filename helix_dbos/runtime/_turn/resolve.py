"""Turning one suspended call's stored answer (or its absence) into its tool result.

Pure: the same entry always resolves the same way, so it can run inside a transaction that
may be retried, or in the workflow body.
"""

from __future__ import annotations

from typing import Any, cast

from ...core.expiry import wait_outcome
from ..records import ServerToolResult, ToolCallRef, ToolResult, TurnError, TurnOutcome

__all__ = ["call_outcome", "child_result", "end_fields", "resolve_call"]


def resolve_call(item: ToolCallRef, entry: dict[str, Any] | None, abandon: bool) -> ToolResult:
    """The result of a suspended call from its stored pending entry (camelCase JSON).

    Returns a result (``ok``, ``result`` | ``error`` + ``errorCode``, ``outcome``,
    ``waitMs``). An approved approval returns ``runInput`` (and no ``ok`` yet): the caller
    runs the tool with it, and the tool's result completes this one.
    """
    tcid, name = item["toolCallId"], item["toolName"]
    if entry is None:
        return _not_executed(tcid, name)
    if entry.get("submittedAt") is None:
        # No answer: a new message abandoned it, or its deadline lapsed (the call expired: what
        # that means is the tool's policy, ``_expired``).
        if abandon:
            return _abandoned(tcid, name, entry["deadlineAt"])
        return _expired(tcid, name, entry)
    return _answered(tcid, name, entry)


def _not_executed(tcid: str, name: str) -> ToolResult:
    """The result of a call whose entry is gone (a stop cleared it): it never ran."""
    return {
        "toolCallId": tcid,
        "toolName": name,
        "suspended": True,
        "ok": False,
        "errorCode": "not_executed",
        "outcome": "not_executed",
        "waitMs": 0,
    }


def _abandoned(tcid: str, name: str, deadline: int) -> ToolResult:
    """The result of an unanswered call a new message abandoned (``abandon_pending``)."""
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


def _answered(tcid: str, name: str, entry: dict[str, Any]) -> ToolResult:
    """The result of a call with a stored answer: a client's result or error, or a human's
    approval or denial. Every such result starts with the same fields, in the same order."""
    answered: dict[str, Any] = {
        "toolCallId": tcid,
        "toolName": name,
        "suspended": True,
        "deadlineAt": entry["deadlineAt"],
        "outcome": "answered",
        "waitMs": entry["submittedAt"] - entry["registeredAt"],
    }
    response = entry.get("response") or {}
    if entry["kind"] == "client":
        answered.update(_client_answer(response))
    else:
        answered.update(_approval_answer(response, entry))
        if "decidedBy" in response:
            answered["decidedBy"] = _decider(response)
    return cast("ToolResult", answered)


def _decider(response: dict[str, Any]) -> dict[str, Any]:
    """Who decided an approval, for ``tool_end``: the last decider, with a quorum's
    approvers."""
    decider = dict(response["decidedBy"])
    if "approvers" in response:
        decider["approvers"] = response["approvers"]
    return decider


def _client_answer(response: dict[str, Any]) -> dict[str, Any]:
    """What a client's answer adds: its error (no code: the client's own words), or its
    result (whatever JSON it sent, ``null`` included)."""
    if "error" in response:
        return {"ok": False, "error": response["error"], "errorCode": None}
    return {"ok": True, "result": response.get("result")}


def _approval_answer(response: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """What a human's answer to an approval adds: a denial (with its reason, if given), or
    the input the tool runs with (the edited one, if edited)."""
    if not response.get("approved"):
        reason = response.get("reason")
        return {
            "ok": False,
            "error": "A human denied this call." + (f" Reason: {reason}" if reason else ""),
            "errorCode": "approval_denied",
        }
    # An edit of ``{}`` is an edit (every field defaulted), not "no edit". No ``ok`` yet: it is
    # the tool's to say (``turn._resolve`` completes this result with the tool's own).
    return {"runInput": response["editedInput"] if "editedInput" in response else entry["input"]}


def _expired(tcid: str, name: str, entry: dict[str, Any]) -> ToolResult:
    """The result of a call whose deadline lapsed, by the policy recorded on its entry.

    Always ``outcome: "timeout"`` (the recorded name of an expiry) with ``onTimeout``, the
    policy applied: ``error`` (``client_tool_timeout``, the default; a lapse is never a
    denial unless the tool says so), ``deny`` (``approval_expired``: the model reads a
    denial whose reason says the approval expired), ``approve`` (``runInput``: the tool runs
    with the call's arguments) or ``result`` (the tool's default result, as if answered).
    """
    policy = entry.get("onTimeout") or {}
    action = policy.get("action", "error")
    expired: dict[str, Any] = {
        "toolCallId": tcid,
        "toolName": name,
        "suspended": True,
        "deadlineAt": entry["deadlineAt"],
        "outcome": "timeout",
        "onTimeout": action,
        "waitMs": entry["deadlineAt"] - entry["registeredAt"],
    }
    if action == "approve":
        expired["runInput"] = entry["input"]  # no ``ok`` yet: the tool's to say
    elif action == "result":
        expired.update(ok=True, result=policy.get("result"))
    elif action == "deny":
        expired.update(ok=False, errorCode="approval_expired")
    else:
        expired.update(ok=False, onTimeout="error", errorCode="client_tool_timeout")
    return cast("ToolResult", expired)


def call_outcome(result: ToolResult) -> str | None:
    """How a suspended call's wait ended, for the stream and the log: ``answered`` (a
    client's result or error, or an approval given), ``denied`` (a human refused it),
    ``expired`` (its deadline lapsed, whatever the policy made of it) or ``abandoned``;
    ``None`` for a call that never waited."""
    return wait_outcome(result)


def end_fields(result: ToolResult) -> dict[str, Any]:
    """What a ``tool_end`` event adds for a suspended call: ``outcome`` (``call_outcome``)
    and, for an expired call, ``onTimeout`` (the policy applied); for an answered approval,
    ``decider`` (who decided: ``principal``, ``tenant``, ``credential``, a quorum's
    ``approvers``)."""
    outcome = call_outcome(result)
    if outcome is None:
        return {}
    if outcome == "expired":
        return {"outcome": outcome, "onTimeout": result.get("onTimeout", "error")}
    if "decidedBy" in result:
        return {"outcome": outcome, "decider": result["decidedBy"]}
    return {"outcome": outcome}


def child_result(outcome: TurnOutcome) -> ServerToolResult:
    """A sub-agent call's result from the sub-agent's turn outcome."""
    if outcome.get("outcome") == "completed":
        return {
            "ok": True,
            "result": {"text": outcome.get("text", ""), "output": outcome.get("output")},
        }
    if outcome.get("outcome") == "stopped":
        return {
            "ok": False,
            "error": "The sub-agent was stopped before it finished.",
            "errorCode": "aborted",
        }
    error: TurnError | dict[str, Any] = outcome.get("error") or {}
    return {
        "ok": False,
        "error": f"The sub-agent failed: {error.get('message', '')}",
        "errorCode": error.get("code", "tool_execution_failed"),
    }
