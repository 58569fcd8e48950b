"""The operator's read model: recent sessions, and everything about one session.

``helix-dbos sessions`` and ``helix-dbos inspect`` read through these functions, which only read,
through an :class:`~helix_dbos.runtime.operator.Operator`: the session tables through the store,
and DBOS's status of each turn through DBOS's public client. No DBOS process is launched and
nothing a running runtime owns is touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .core.clock import now_ms
from .core.messages import Message
from .core.session import PendingCall, SessionState, Tombstone
from .runtime.fleet import adoption_history
from .runtime.hibernation import continuation_id, mark_of, waits_on_child
from .runtime.operator import Operator, WorkflowInfo

if TYPE_CHECKING:
    from .runtime.fleet import ExecutorInfo

__all__ = [
    "SessionReport",
    "SessionRow",
    "TreeNode",
    "WorkflowInfo",
    "inspect_session",
    "adoption_history",
    "list_sessions",
    "recoveries",
    "render_executors",
    "render_report",
    "render_sessions",
]


def _utc(value: datetime) -> datetime:
    # SQLite hands timestamps back without their zone; every stored time is UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _iso(value: datetime | None) -> str | None:
    return _utc(value).astimezone(UTC).isoformat(timespec="seconds") if value else None


def _iso_ms(ms: int | None) -> str | None:
    return _iso(datetime.fromtimestamp(ms / 1000, UTC)) if ms is not None else None


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
        "createdAt": _iso_ms(w.created_at),
        "updatedAt": _iso_ms(w.updated_at),
    }


def _continuation_id(state: SessionState) -> str | None:
    """The workflow that continues ``state``'s hibernated turn (started or not), if any."""
    return continuation_id(state)


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
        "at": _iso_ms(int(mark["at"])),
        "dueAt": _iso_ms(due_at) if due_at and not waiting else None,
        "due": due_at <= at_ms,
        "waitingOnSubAgentCall": mark.get("child") if waiting else None,
        "step": mark["step"],
        "workflowId": mark["workflowId"],
        "continuationWorkflowId": _continuation_id(state),
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
            "createdAt": _iso(self.created_at),
            "updatedAt": _iso(self.updated_at),
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
            "tombstones": {k: v.dump() for k, v in self.tombstones.items()},
            "messageCount": self.message_count,
            "messages": [m.to_row() | {"role": m.role} for m in self.messages],
            "tree": self.tree.dump(),
            "adoptions": self.adoptions,
        }


def _build_tree(states: Sequence[SessionState], workflows: dict[str, WorkflowInfo]) -> TreeNode:
    nodes = {
        s.session_id: TreeNode(
            s.session_id,
            s.agent_type,
            s.status,
            s.run_id,
            workflows.get(s.workflow_id or ""),
            sorted(s.pending.values(), key=lambda p: (p.run_id, p.index)),
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
    continuation = _continuation_id(session)
    # One read of DBOS's status for every turn of the tree and the continuation, if any.
    workflows = await operator.workflows(
        [*(s.workflow_id for s in tree if s.workflow_id), *([continuation] if continuation else [])]
    )
    history = await operator.store.load_messages(session_id)
    mine = {session_id}
    for s in tree:  # the inspected session and everything below it
        if s.parent_session_id in mine:
            mine.add(s.session_id)
    pending = [
        (s.session_id, p)
        for s in tree
        if s.session_id in mine
        for p in sorted(s.pending.values(), key=lambda p: (p.run_id, p.index))
    ]
    return SessionReport(
        adoptions=await adoption_history(
            operator.store, (s.workflow_id for s in tree if s.workflow_id)
        ),
        session=session,
        root=root,
        workflow=workflows.get(session.workflow_id or ""),
        pending=pending,
        messages=history[-messages:] if messages > 0 else [],
        message_count=len(history),
        tree=_build_tree(tree, workflows),
        at_ms=now_ms(),
        continuation=workflows.get(continuation or ""),
    )


# -- rendering ------------------------------------------------------------------------------


def _age(at: datetime | None, now: datetime) -> str:
    if at is None:
        return "-"
    return f"{span((_utc(now) - _utc(at)).total_seconds())} ago"


def span(seconds: float) -> str:
    """A duration for people: ``42s``, ``17m``, ``5.2h``, ``3.0d`` (its sign dropped)."""
    seconds = abs(seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f}m"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def render_sessions(rows: Sequence[SessionRow], now: datetime | None = None) -> str:
    """``helix-dbos sessions`` as a table."""
    if not rows:
        return "no sessions"
    now = now or datetime.now(UTC)
    return _table(
        ["SESSION", "AGENT", "STATUS", "RUN", "PENDING", "UPDATED"],
        [
            [
                r.session_id,
                r.agent_type,
                f"{r.status}(hibernated)" if r.hibernated else r.status,
                r.run_id or "-",
                str(r.pending_calls),
                _age(r.updated_at, now),
            ]
            for r in rows
        ],
    )


def _deadline(call: PendingCall, at_ms: int) -> str:
    left = (call.deadline_at - at_ms) / 1000
    when = _iso_ms(call.deadline_at) or "-"
    return f"{when} (in {span(left)})" if left > 0 else f"{when} (lapsed {span(left)} ago)"


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _message_line(m: Message) -> str:
    if m.role == "assistant" and m.tool_calls:
        calls = ", ".join(f"{c.name}({c.id})" for c in m.tool_calls)
        return _one_line(f"assistant: {m.content + ' ' if m.content else ''}-> {calls}")
    if m.role == "tool":
        mark = f" error{'=' + m.error_code if m.error_code else ''}" if m.is_error else ""
        return _one_line(f"tool {m.tool_name}({m.tool_call_id}){mark}: {m.content}")
    return _one_line(f"{m.role}: {m.content}")


def _tree_lines(
    node: TreeNode, focus: str, prefix: str = "", last: bool = True, top: bool = True
) -> list[str]:
    workflow = node.workflow.status if node.workflow else "no workflow"
    if node.hibernated:
        workflow = "hibernated"  # its workflow has ended; none runs it until it continues
    waiting = (
        f"  waiting on {', '.join(p.tool_call_id for p in node.pending)}" if node.pending else ""
    )
    mark = "  <- this session" if node.session_id == focus else ""
    branch = "" if top else ("└── " if last else "├── ")
    lines = [
        f"{prefix}{branch}{node.session_id}  {node.agent_type}  {node.status}  "
        f"[{workflow}]{waiting}{mark}"
    ]
    inner = prefix if top else prefix + ("    " if last else "│   ")
    for i, child in enumerate(node.children):
        lines += _tree_lines(child, focus, inner, i == len(node.children) - 1, top=False)
    return lines


def _hibernation_lines(report: SessionReport) -> list[str]:
    """``hibernated since <at>, due <dueAt>`` and the continuation's workflow, if hibernated."""
    mark = mark_of(report.session)
    if mark is None:
        return []
    due_at, at = int(mark["dueAt"]), report.at_ms
    if waits_on_child(mark):
        due = f"waiting on the sub-agent of {mark.get('child')}: due when it ends"
    elif not due_at:
        due = "due now (its batch is complete, or a new message abandoned it)"
    elif due_at > at:
        due = f"due {_iso_ms(due_at)} (in {span((due_at - at) / 1000)})"
    else:
        due = f"due {_iso_ms(due_at)} (overdue {span((at - due_at) / 1000)})"
    w = report.continuation
    started = f"{w.status}  executor={w.executor_id}" if w is not None else "not started"
    return [
        f"hibernated since {_iso_ms(int(mark['at']))}, {due}",
        f"continues {_continuation_id(report.session)}  {started}",
    ]


def render_report(report: SessionReport) -> str:
    """``helix-dbos inspect`` as text."""
    s = report.session
    out = [
        f"session   {s.session_id}",
        f"agent     {s.agent_type}",
        f"status    {s.status}"
        + (f"  error: {s.error.get('code')}: {s.error.get('message')}" if s.error else ""),
        f"run       {s.run_id or '-'}",
    ]
    if s.principal is not None or s.tenant is not None:
        out.append(f"owner     principal={s.principal or '-'}  tenant={s.tenant or '-'}")
    if not s.is_root:
        out.append(f"root      {s.root_session_id}  (parent {s.parent_session_id})")
    w = report.workflow
    if w is not None:
        out.append(
            f"workflow  {w.workflow_id}  {w.status}  executor={w.executor_id} "
            f"version={w.application_version} recoveries={recoveries(w)} "
            f"updated={_iso_ms(w.updated_at)}"
        )
    else:
        out.append(f"workflow  {s.workflow_id or '-'}  (no DBOS status row)")
    out += _hibernation_lines(report)
    out.append("")
    out.append(f"pending calls ({len(report.pending)})")
    for owner, call in report.pending:
        answered = (
            f"answered {_iso_ms(call.submitted_at)}"
            if call.submitted_at is not None
            else "awaiting an answer"
        )
        out.append(
            f"  {call.tool_call_id}  {call.tool_name}  {call.kind}  run={call.run_id}  "
            f"owner={owner}"
        )
        out.append(f"      deadline {_deadline(call, report.at_ms)}  {answered}")
    out.append(f"ownership on the root {report.root.session_id} ({len(report.ownership)})")
    for tcid, owner in sorted(report.ownership.items()):
        out.append(f"  {tcid} -> {owner}")
    out.append(f"tombstones ({len(report.tombstones)})")
    for tcid, stone in sorted(report.tombstones.items(), key=lambda kv: kv[1].completed_at):
        out.append(
            f"  {tcid}  {stone.outcome}  completed {_iso_ms(stone.completed_at)}  "
            f"run={stone.run_id}  owner={stone.owner_session_id}"
        )
    out.append("")
    shown = len(report.messages)
    out.append(f"last {shown} of {report.message_count} messages")
    out += [f"  {_message_line(m)}" for m in report.messages]
    out.append("")
    out.append("tree")
    out += [f"  {line}" for line in _tree_lines(report.tree, s.session_id)]
    if report.adoptions:
        out.append("")
        out.append(f"adoptions ({len(report.adoptions)})")
        for a in report.adoptions:
            out.append(
                f"  {a['adoptedAt']}  {a['workflowId']}  {a['kind']} from {a['fromExecutor']} "
                f"({a['fromVersion']}) by {a['adoptedBy']} ({a['toVersion']})"
            )
    return "\n".join(out)


def render_executors(
    found: Sequence[ExecutorInfo],
    pending_by_version: dict[str, int],
    version: str,
    now: datetime | None = None,
) -> str:
    """``helix-dbos executors`` as text: the fleet, then parked turns per version."""
    now = now or datetime.now(UTC)
    table = (
        _table(
            ["EXECUTOR", "STATE", "VERSION", "HOST", "PID", "HEARTBEAT", "PARKED", "ADOPTED BY"],
            [
                [
                    e.executor_id,
                    e.state,
                    e.application_version,
                    e.hostname or "-",
                    str(e.pid or "-"),
                    _age(e.heartbeat_at, now) if e.pid is not None else "-",
                    str(e.pending),
                    e.adopted_by or "-",
                ]
                for e in found
            ],
        )
        if found
        else "no executors"
    )
    lines = [table, "", f"this release runs application version {version}"]
    for v, count in sorted(pending_by_version.items()):
        lines.append(f"  {count} pending turn workflows of version {v}")
    return "\n".join(lines)
