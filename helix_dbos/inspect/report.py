"""The read model's facts: recent sessions, and everything about one session.

``helix-dbos sessions`` and ``helix-dbos inspect`` read through these functions, which only read,
through an :class:`~helix_dbos.runtime.Operator`: the session tables through the store,
and DBOS's status of each turn through DBOS's public client. No DBOS process is launched and
nothing a running runtime owns is touched. Their JSON form is here; their text is ``render.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..core.clock import now_ms
from ..core.messages import Message
from ..core.session import PendingCall, SessionState, Tombstone
from ..runtime import (
    Operator,
    WorkflowInfo,
    companion_views,
    continuation_id,
    mark_of,
    waits_on_child,
)
from .times import iso, iso_ms

__all__ = [
    "SessionReport",
    "SessionRow",
    "TreeNode",
    "hibernation_dump",
    "inspect_session",
    "list_sessions",
    "recoveries",
]


def recoveries(w: WorkflowInfo) -> int:
    """How many times DBOS recovered the workflow: started it again after its first run (a
    crash, a restart with the turn parked, an adoption by another process).

    DBOS's ``recovery_attempts`` counts every dispatch since the workflow began (or was last
    resumed), the first run included: a workflow that never crashed reads 1 once it runs
    (0 while it waits in a queue). The recoveries are the dispatches after the first.
    """
    return max(w.recovery_attempts - 1, 0)


def _workflow_dump(w: WorkflowInfo) -> dict[str, Any]:
    return {
        "workflowId": w.workflow_id,
        "status": w.status,
        "executorId": w.executor_id,
        "applicationVersion": w.application_version,
        "recoveries": recoveries(w),
        "dbosRecoveryAttempts": w.recovery_attempts,
        "createdAt": iso_ms(w.created_at),
        "updatedAt": iso_ms(w.updated_at),
    }


def hibernation_dump(
    state: SessionState, at_ms: int, continuation: WorkflowInfo | None = None
) -> dict[str, Any] | None:
    """``state``'s hibernated turn (``metadata.hibernated``) as JSON, or ``None`` when its turn
    is not hibernated. ``dueAt`` is ``None`` when the turn is due at once (its batch is
    complete, or a new message abandoned it); ``due``: whether it is due at ``at_ms``."""
    mark = mark_of(state)
    if mark is None:
        return None
    due_at = int(mark["dueAt"])
    waiting = waits_on_child(mark)
    return {
        "at": iso_ms(int(mark["at"])),
        "dueAt": iso_ms(due_at) if due_at and not waiting else None,
        "due": due_at <= at_ms,
        "waitingOnSubAgentCall": mark.get("child") if waiting else None,
        "step": mark["step"],
        "workflowId": mark["workflowId"],
        "continuationWorkflowId": continuation_id(state),
        "continuationStatus": continuation.status if continuation else None,
    }


# -- recent sessions ------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionRow:
    """One line of ``helix-dbos sessions``."""

    session_id: str
    agent_type: str
    status: str
    run_id: str | None
    root_session_id: str
    parent_session_id: str | None
    pending_calls: int
    created_at: datetime | None
    updated_at: datetime | None
    hibernated: dict[str, Any] | None = None
    """``hibernation_dump`` of the session when its turn is hibernated."""

    def dump(self) -> dict[str, Any]:
        """The JSON form (camelCase keys, ISO-8601 UTC times)."""
        return {
            "sessionId": self.session_id,
            "agentType": self.agent_type,
            "status": self.status,
            "runId": self.run_id,
            "rootSessionId": self.root_session_id,
            "parentSessionId": self.parent_session_id,
            "pendingCalls": self.pending_calls,
            "createdAt": iso(self.created_at),
            "updatedAt": iso(self.updated_at),
            "hibernated": self.hibernated,
        }


async def list_sessions(
    operator: Operator,
    *,
    status: str | None = None,
    agent_type: str | None = None,
    limit: int = 20,
) -> list[SessionRow]:
    """The most recently updated sessions, newest first."""
    at = now_ms()
    return [
        SessionRow(
            session_id=listed.state.session_id,
            agent_type=listed.state.agent_type,
            status=listed.state.status,
            run_id=listed.state.run_id,
            root_session_id=listed.state.root_session_id,
            parent_session_id=listed.state.parent_session_id,
            pending_calls=len(listed.state.pending),
            created_at=listed.created_at,
            updated_at=listed.updated_at,
            hibernated=hibernation_dump(listed.state, at),
        )
        for listed in await operator.sessions(status=status, agent_type=agent_type, limit=limit)
    ]


# -- one session ----------------------------------------------------------------------------


@dataclass
class TreeNode:
    """One session of a tree (root first), with its turn's workflow and its pending calls."""

    session_id: str
    agent_type: str
    status: str
    run_id: str | None
    workflow: WorkflowInfo | None
    pending: list[PendingCall]
    children: list[TreeNode] = field(default_factory=list)
    hibernated: bool = False
    """Its turn is hibernated: no workflow runs it until its continuation starts."""

    def dump(self) -> dict[str, Any]:
        """The JSON form (children nested)."""
        return {
            "sessionId": self.session_id,
            "agentType": self.agent_type,
            "status": self.status,
            "runId": self.run_id,
            "workflowStatus": self.workflow.status if self.workflow else None,
            "hibernated": self.hibernated,
            "pendingToolCallIds": [p.tool_call_id for p in self.pending],
            "children": [c.dump() for c in self.children],
        }


@dataclass
class SessionReport:
    """Everything ``helix-dbos inspect`` shows about one session."""

    session: SessionState
    root: SessionState
    workflow: WorkflowInfo | None
    pending: list[tuple[str, PendingCall]]
    """``(owner session, call)`` for every pending call of the session's tree."""
    messages: list[Message]
    message_count: int
    tree: TreeNode
    at_ms: int
    adoptions: list[dict[str, Any]] = field(default_factory=list)
    """Every take-over of a turn of the tree by another process (docs/fleet.md)."""
    continuation: WorkflowInfo | None = None
    """The continuation's workflow, when the session's turn is hibernated and it started."""
    companions: list[dict[str, Any]] = field(default_factory=list)
    """The session's companions and their state (docs/companions.md)."""
    denied: frozenset[str] = frozenset()
    """The tombstoned calls whose approval a human denied: the tombstone says ``answered``
    (an answer came), their ``tool_end`` and this report say ``denied``."""

    def tombstone_outcome(self, tool_call_id: str) -> str:
        """How the call ended as ``tool_end`` says it: ``denied`` for a denied approval,
        else the tombstone's outcome."""
        if tool_call_id in self.denied:
            return "denied"
        return self.tombstones[tool_call_id].outcome

    @property
    def ownership(self) -> dict[str, str]:
        """The root's routing map: ``toolCallId -> owning session``."""
        return self.root.ownership

    @property
    def tombstones(self) -> dict[str, Tombstone]:
        """The root's completed-call markers."""
        return self.root.completed

    def dump(self) -> dict[str, Any]:
        """The JSON form."""
        s = self.session
        return {
            "sessionId": s.session_id,
            "agentType": s.agent_type,
            "status": s.status,
            "runId": s.run_id,
            "workflowId": s.workflow_id,
            "rootSessionId": s.root_session_id,
            "parentSessionId": s.parent_session_id,
            "principal": s.principal,
            "tenant": s.tenant,
            "error": s.error,
            "workflow": _workflow_dump(self.workflow) if self.workflow else None,
            "hibernated": hibernation_dump(s, self.at_ms, self.continuation),
            "pendingToolCalls": [
                {
                    **call.dump(),
                    "ownerSessionId": owner,
                    "remainingMs": call.deadline_at - self.at_ms,
                }
                for owner, call in self.pending
            ],
            "ownership": dict(self.ownership),
            "tombstones": {
                k: v.dump() | {"waitOutcome": self.tombstone_outcome(k)}
                for k, v in self.tombstones.items()
            },
            "messageCount": self.message_count,
            "messages": [m.to_row() | {"role": m.role} for m in self.messages],
            "tree": self.tree.dump(),
            "adoptions": self.adoptions,
            "companions": self.companions,
        }


def _in_order(state: SessionState) -> list[PendingCall]:
    """``state``'s pending calls by run, then in the model's call order."""
    return sorted(state.pending.values(), key=lambda p: (p.run_id, p.index))


def _pending_below(tree: Sequence[SessionState], session_id: str) -> list[tuple[str, PendingCall]]:
    """``(owner session, call)`` for the pending calls of ``session_id`` and every session
    below it in ``tree`` (root first, a parent before its children)."""
    mine = {session_id}
    for s in tree:
        if s.parent_session_id in mine:
            mine.add(s.session_id)
    return [(s.session_id, p) for s in tree if s.session_id in mine for p in _in_order(s)]


def _build_tree(states: Sequence[SessionState], workflows: dict[str, WorkflowInfo]) -> TreeNode:
    nodes = {
        s.session_id: TreeNode(
            s.session_id,
            s.agent_type,
            s.status,
            s.run_id,
            workflows.get(s.workflow_id or ""),
            _in_order(s),
            hibernated=mark_of(s) is not None,
        )
        for s in states
    }
    root = nodes[states[0].session_id]
    for s in states[1:]:
        parent = nodes.get(s.parent_session_id or "")
        if parent is not None:
            parent.children.append(nodes[s.session_id])
    return root


async def _denied_calls(
    operator: Operator, session_id: str, history: list[Message], tombstones: dict[str, Tombstone]
) -> frozenset[str]:
    """The ``answered`` tombstones whose tool result is an approval's denial (read from their
    owners' messages: the inspected session's are ``history``)."""
    answered = {k: t for k, t in tombstones.items() if t.outcome == "answered"}
    denied: set[str] = set()
    for owner in {t.owner_session_id for t in answered.values()}:
        messages = history if owner == session_id else await operator.store.load_messages(owner)
        denied |= {
            m.tool_call_id
            for m in messages
            if m.tool_call_id in answered and m.error_code == "approval_denied"
        }
    return frozenset(denied)


async def inspect_session(
    operator: Operator, session_id: str, *, messages: int = 10
) -> SessionReport:
    """The session's row, its tree from the root, pending calls, ownership, tombstones, the
    last ``messages`` messages and the DBOS status of every turn in the tree.

    Raises:
        SessionNotFoundError: no such session.
    """
    tree = await operator.tree(session_id)
    root = tree[0]
    session = next(s for s in tree if s.session_id == session_id)
    continuation = continuation_id(session)
    # One read of DBOS's status for every turn of the tree and the continuation, if any.
    workflows = await operator.workflows(
        [*(s.workflow_id for s in tree if s.workflow_id), *([continuation] if continuation else [])]
    )
    history = await operator.store.load_messages(session_id)
    return SessionReport(
        denied=await _denied_calls(operator, session_id, history, root.completed),
        adoptions=await operator.adoptions(s.workflow_id for s in tree if s.workflow_id),
        session=session,
        root=root,
        workflow=workflows.get(session.workflow_id or ""),
        pending=_pending_below(tree, session_id),
        messages=history[-messages:] if messages > 0 else [],
        message_count=len(history),
        tree=_build_tree(tree, workflows),
        at_ms=now_ms(),
        continuation=workflows.get(continuation or ""),
        companions=companion_views(session, tree),
    )
