"""The rows of the notification outbox that a commit writes, one per event of a parked call.

Pure builders: each commit that parks, answers, expires or stops calls writes the rows these
return, in its own transaction (``store/outbox.py``), so an event is recorded exactly when its
cause commits. An event's key is ``<kind>:<runId>::<toolCallId>`` (``event_key``): one per
kind and call, the same on every replay, and the idempotency key the hooks receive.

A kind is written only when the runtime has a hook for it (``hooked_kinds``): a deployment
without hooks writes nothing. ``deadline_near`` is the exception: a tool with
``remind_before`` always gets its row, since the reminder is also a log line and a stream
event (``_notifications/dispatcher.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from ...core.session import PendingCall, SessionState
from ...store import outbox_queue
from .. import names
from .._commits.once import after_commit
from .._context import current
from ..records import PlanItem, ToolResult

__all__ = [
    "KINDS",
    "NotificationKind",
    "answer_rows",
    "event_key",
    "hooked_kinds",
    "park_rows",
    "settle_rows",
    "stop_rows",
    "write",
]

NotificationKind = Literal["pending", "deadline_near", "expired", "resolved", "escalated"]
"""The events of a parked call the hooks are told (``escalated``: an approval's policy let a
further group answer it)."""
KINDS: Final[tuple[NotificationKind, ...]] = (
    "pending",
    "deadline_near",
    "expired",
    "resolved",
    "escalated",
)


async def write(rows: list[dict[str, Any]], *, in_commit: bool = True) -> None:
    """Write ``rows`` in the unit of work; ``in_commit``: inside an exactly-once commit,
    whose landing wakes this process's dispatcher (it delivers them without waiting for its
    next poll)."""
    if not rows:
        return
    await outbox_queue(rows)
    if in_commit:
        after_commit(_wake)


def _wake() -> None:
    hooks = current().notes
    if hooks is not None:
        hooks.wake()


def event_key(kind: str, run_id: str, tool_call_id: str) -> str:
    """An event's idempotency key: ``<kind>:<runId>::<toolCallId>``."""
    return f"{kind}:{names.approval_id(run_id, tool_call_id)}"


def hooked_kinds() -> frozenset[str]:
    """The kinds this runtime has hooks for (none in a process without a runtime's hooks)."""
    try:
        hooks = current().notes
    except RuntimeError:
        return frozenset()
    return hooks.kinds if hooks is not None else frozenset()


def _row(
    kind: NotificationKind,
    *,
    session_id: str,
    root_session_id: str,
    run_id: str,
    tool_call_id: str,
    tool_name: str,
    at: int,
    payload: dict[str, Any],
    due_at: int | None = None,
) -> dict[str, Any]:
    return {
        "event_key": event_key(kind, run_id, tool_call_id),
        "kind": kind,
        "session_id": session_id,
        "root_session_id": root_session_id,
        "run_id": run_id,
        "tool_call_id": tool_call_id,
        "tool_name": tool_name,
        "payload": payload,
        "created_at": at,
        "due_at": at if due_at is None else due_at,
    }


def _call(entry: PendingCall) -> dict[str, Any]:
    """What every event of a call says about it."""
    out: dict[str, Any] = {"callKind": entry.kind, "deadlineAt": entry.deadline_at}
    if entry.approval_id is not None:
        out["approvalId"] = entry.approval_id
    return out


def park_rows(
    session_id: str,
    root_session_id: str,
    plan: Iterable[PlanItem],
    entries: Mapping[str, PendingCall],
    kinds: frozenset[str] | None = None,
) -> list[dict[str, Any]]:
    """The rows of calls just parked: ``pending`` (due now, with the call's arguments) and,
    for a tool with ``remindBefore``, ``deadline_near`` (due that long before the deadline,
    or at once when the deadline is nearer than that)."""
    kinds = hooked_kinds() if kinds is None else kinds
    rows: list[dict[str, Any]] = []
    for item in plan:
        entry = entries.get(item["toolCallId"])
        if entry is None:
            continue
        common: dict[str, Any] = {
            "session_id": session_id,
            "root_session_id": root_session_id,
            "run_id": entry.run_id,
            "tool_call_id": entry.tool_call_id,
            "tool_name": entry.tool_name,
            "at": entry.registered_at,
        }
        if "pending" in kinds:
            payload = {**_call(entry), "input": entry.input}
            if entry.args_digest is not None:
                payload["argsDigest"] = entry.args_digest
            if entry.on_timeout is not None:
                payload["onTimeout"] = entry.on_timeout["action"]
            rows.append(_row("pending", payload=payload, **common))
        remind = item.get("remindBefore")
        if remind is not None:
            due = max(entry.registered_at, entry.deadline_at - int(remind * 1000))
            payload = {**_call(entry), "remindBefore": remind}
            rows.append(_row("deadline_near", payload=payload, due_at=due, **common))
        escalate_at = (entry.policy or {}).get("escalateAt")
        if escalate_at is not None and "escalated" in kinds:
            policy = entry.policy or {}
            payload = {
                **_call(entry),
                "escalateAt": escalate_at,
                "escalateTo": policy.get("escalateTo"),
                "roles": policy.get("roles"),
            }
            # It happens at its time (not at the park's): ``note.at`` is the escalation's.
            rows.append(_row("escalated", payload=payload, **{**common, "at": escalate_at}))
    return rows


def settle_rows(
    session_id: str,
    root_session_id: str,
    run_id: str,
    plan: Iterable[PlanItem],
    results: Iterable[ToolResult],
    at: int,
) -> list[dict[str, Any]]:
    """The rows of a batch's committed results: ``expired`` for each call whose deadline
    lapsed (with the policy applied), ``resolved`` (``abandoned``) for each call a new message
    dropped. Answered calls were told when their answer was stored (``answer_rows``)."""
    kinds = hooked_kinds()
    if not kinds & {"expired", "resolved"}:
        return []
    call_kinds = {item["toolCallId"]: item["kind"] for item in plan}
    rows: list[dict[str, Any]] = []
    for r in results:
        outcome = r.get("outcome") if r.get("suspended") else None
        kind: NotificationKind
        if outcome == "timeout" and "expired" in kinds:
            kind = "expired"
            payload: dict[str, Any] = {
                "outcome": "expired",
                "onTimeout": r.get("onTimeout", "error"),
                "ok": bool(r.get("ok")),
                "waitMs": r.get("waitMs", 0),
            }
        elif outcome == "abandoned" and "resolved" in kinds:
            kind, payload = "resolved", {"outcome": "abandoned"}
        else:
            continue
        tcid = r["toolCallId"]
        call_kind = call_kinds.get(tcid, "client")
        payload.update(callKind=call_kind, deadlineAt=r.get("deadlineAt"))
        if call_kind == "approval":
            payload["approvalId"] = names.approval_id(run_id, tcid)
        rows.append(
            _row(
                kind,
                session_id=session_id,
                root_session_id=root_session_id,
                run_id=run_id,
                tool_call_id=tcid,
                tool_name=r["toolName"],
                at=at,
                payload=payload,
            )
        )
    return rows


def answer_rows(owner: SessionState, entry: PendingCall, at: int) -> list[dict[str, Any]]:
    """The ``resolved`` row of an answer just stored: ``answered`` (a client's result or
    error, or an approval given) or ``denied`` (an approval refused)."""
    if "resolved" not in hooked_kinds():
        return []
    response = entry.response or {}
    payload = _call(entry)
    if entry.kind == "approval":
        approved = bool(response.get("approved"))
        payload.update(outcome="answered" if approved else "denied", approved=approved)
        if "decidedBy" in response:  # who decided (``core/approval_policy.py``)
            payload["decider"] = response["decidedBy"]
            if "approvers" in response:
                payload["approvers"] = response["approvers"]
    else:
        payload.update(outcome="answered", isError="error" in response)
    return [
        _row(
            "resolved",
            session_id=owner.session_id,
            root_session_id=owner.root_session_id,
            run_id=entry.run_id,
            tool_call_id=entry.tool_call_id,
            tool_name=entry.tool_name,
            at=at,
            payload=payload,
        )
    ]


def stop_rows(
    root_session_id: str, stopped: Iterable[tuple[str, PendingCall]], at: int
) -> list[dict[str, Any]]:
    """The ``resolved`` (``stopped``) rows of calls an interrupt, an abort or a failed turn
    cleared (each with the id of the session that made it)."""
    if "resolved" not in hooked_kinds():
        return []
    return [
        _row(
            "resolved",
            session_id=session_id,
            root_session_id=root_session_id,
            run_id=entry.run_id,
            tool_call_id=entry.tool_call_id,
            tool_name=entry.tool_name,
            at=at,
            payload={**_call(entry), "outcome": "stopped"},
        )
        for session_id, entry in stopped
    ]
