"""The operator-facing reads of a runtime: a session's status view, the approval inbox, and
the polls that wait for a status or for pending calls."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ...core.clock import now_ms
from ...core.session import PendingCall, SessionState
from ...store import ApprovalPage, ApprovalQuery, SessionStore, list_approvals
from .._commits.opening import waiting_for
from .._companions.sends import companion_views
from .._context import RuntimeContext
from .._operations.control import tree_of

__all__ = ["TERMINAL", "approval_page", "status_view", "wait_for_pending", "wait_for_status"]

TERMINAL = frozenset({"completed", "failed", "interrupted"})
"""The statuses a session's turn ends in."""

StatusRead = Callable[[str], Awaitable[dict[str, Any]]]
"""Reads a session's status view (``AgentRuntime.status``)."""


def _pending_view(owner: SessionState, p: PendingCall) -> dict[str, Any]:
    """One pending call as the status view lists it."""
    return {
        "toolCallId": p.tool_call_id,
        "toolName": p.tool_name,
        "input": p.input,
        "deadlineAt": p.deadline_at,
        "kind": p.kind,
        "ownerSessionId": owner.session_id,
        **({"approvalId": p.approval_id} if p.approval_id else {}),
        **({"submittedAt": p.submitted_at} if p.submitted_at else {}),
    }


async def status_view(ctx: RuntimeContext, session_id: str) -> dict[str, Any]:
    """The status view of a session's tree (``AgentRuntime.status``)."""
    tree = await tree_of(ctx, session_id)
    top = tree[0]
    pending = [
        _pending_view(s, p) for s in tree for p in sorted(s.pending.values(), key=lambda p: p.index)
    ]
    status = top.status
    if status == "running" and any(p.get("submittedAt") is None for p in pending):
        status = "suspended_client_tool"
    body: dict[str, Any] = {
        "sessionId": top.session_id,
        "status": status,
        "runId": top.run_id,
        "pendingToolCalls": pending,
        "waitingFor": waiting_for(str(p["kind"]) for p in pending if "submittedAt" not in p),
    }
    if top.error:
        body["error"] = top.error
    mates = companion_views(top, tree)
    if mates:
        body["companions"] = mates
    for key, value in (("principal", top.principal), ("tenant", top.tenant)):
        if value is not None:
            body[key] = value
    return body


async def approval_page(
    store: SessionStore,
    *,
    tool: str | None,
    session_id: str | None,
    principal: str | None,
    tenant: str | None,
    older_than: float | None,
    deadline_before: int | None,
    limit: int,
    cursor: str | None,
    viewer: str | None = None,
) -> ApprovalPage:
    """A page of the approval inbox (``AgentRuntime.approvals``)."""
    query = ApprovalQuery(
        tool=tool,
        session_id=session_id,
        principal=principal,
        tenant=tenant,
        older_than_ms=None if older_than is None else round(older_than * 1000),
        deadline_before=deadline_before,
        limit=limit,
        cursor=cursor,
        viewer=viewer,
    )
    return await list_approvals(store, query, now_ms())


async def wait_for_status(
    status: StatusRead, session_id: str, until: Iterable[str], timeout: float, interval: float
) -> dict[str, Any]:
    """Poll ``status`` until it is one of ``until`` (``AgentRuntime.wait``)."""
    wanted = set(until)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        view = await status(session_id)
        if view["status"] in wanted:
            return view
        if loop.time() > deadline:
            raise TimeoutError(f"Session {session_id} is {view['status']}, not {sorted(wanted)}")
        await asyncio.sleep(interval)


async def wait_for_pending(
    status: StatusRead, session_id: str, count: int, timeout: float
) -> list[dict[str, Any]]:
    """Poll until at least ``count`` unanswered pending calls exist
    (``AgentRuntime.wait_for_pending``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        view = await status(session_id)
        waiting = [p for p in view["pendingToolCalls"] if "submittedAt" not in p]
        if len(waiting) >= count:
            return waiting
        if view["status"] in TERMINAL or loop.time() > deadline:
            raise TimeoutError(
                f"Session {session_id} is {view['status']} with {len(waiting)} pending calls"
            )
        await asyncio.sleep(0.01)
