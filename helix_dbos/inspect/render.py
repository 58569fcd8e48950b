"""The read model as text: ``helix-dbos sessions``, ``inspect`` and ``executors``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..core.messages import Message
from ..core.session import PendingCall
from ..runtime import continuation_id, mark_of, waits_on_child
from .report import SessionReport, SessionRow, TreeNode, recoveries
from .times import age, iso_ms, span

if TYPE_CHECKING:
    from ..runtime import ExecutorInfo

__all__ = ["render_executors", "render_report", "render_sessions"]


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
                age(r.updated_at, now),
            ]
            for r in rows
        ],
    )


# -- one session ----------------------------------------------------------------------------


def _deadline(call: PendingCall, at_ms: int) -> str:
    left = (call.deadline_at - at_ms) / 1000
    when = iso_ms(call.deadline_at) or "-"
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
        due = f"due {iso_ms(due_at)} (in {span((due_at - at) / 1000)})"
    else:
        due = f"due {iso_ms(due_at)} (overdue {span((at - due_at) / 1000)})"
    w = report.continuation
    started = f"{w.status}  executor={w.executor_id}" if w is not None else "not started"
    return [
        f"hibernated since {iso_ms(int(mark['at']))}, {due}",
        f"continues {continuation_id(report.session)}  {started}",
    ]


def _session_lines(report: SessionReport) -> list[str]:
    """The session's row: id, agent, status (and error), run, owner, root, workflow."""
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
            f"updated={iso_ms(w.updated_at)}"
        )
    else:
        out.append(f"workflow  {s.workflow_id or '-'}  (no DBOS status row)")
    return out


def _pending_lines(report: SessionReport) -> list[str]:
    """The pending calls of the session's tree, each with its deadline and answer."""
    out = [f"pending calls ({len(report.pending)})"]
    for owner, call in report.pending:
        answered = (
            f"answered {iso_ms(call.submitted_at)}"
            if call.submitted_at is not None
            else "awaiting an answer"
        )
        out.append(
            f"  {call.tool_call_id}  {call.tool_name}  {call.kind}  run={call.run_id}  "
            f"owner={owner}"
        )
        out.append(f"      deadline {_deadline(call, report.at_ms)}  {answered}")
        out += _asked_lines(call)
    return out


def _asked_lines(call: PendingCall) -> list[str]:
    """A server tool's questions (an MCP tool's ``input_required``): each form's key, its
    message and the schema it asks for."""
    shown = call.input if isinstance(call.input, dict) else {}
    asked = shown.get("inputRequests") if "arguments" in shown else None
    if not isinstance(asked, dict):
        return []
    out = [
        f"      asks (round {shown.get('round', 1)}), with arguments {json.dumps(shown['arguments'])}"
    ]
    for key, request in asked.items():
        params = (request.get("params") or {}) if isinstance(request, dict) else {}
        schema = json.dumps(params.get("requestedSchema"), sort_keys=True)
        out.append(f"        {key}: {params.get('message', '')!r}  schema {schema}")
    return out


def _root_lines(report: SessionReport) -> list[str]:
    """The root's routing map and its tombstones (oldest first)."""
    out = [f"ownership on the root {report.root.session_id} ({len(report.ownership)})"]
    for tcid, owner in sorted(report.ownership.items()):
        out.append(f"  {tcid} -> {owner}")
    out.append(f"tombstones ({len(report.tombstones)})")
    for tcid, stone in sorted(report.tombstones.items(), key=lambda kv: kv[1].completed_at):
        out.append(
            f"  {tcid}  {report.tombstone_outcome(tcid)}  completed {iso_ms(stone.completed_at)}  "
            f"run={stone.run_id}  owner={stone.owner_session_id}"
        )
    return out


def _adoption_lines(report: SessionReport) -> list[str]:
    """The take-overs of the tree's turns by other processes, after a blank line; or none."""
    if not report.adoptions:
        return []
    out = ["", f"adoptions ({len(report.adoptions)})"]
    for a in report.adoptions:
        out.append(
            f"  {a['adoptedAt']}  {a['workflowId']}  {a['kind']} from {a['fromExecutor']} "
            f"({a['fromVersion']}) by {a['adoptedBy']} ({a['toVersion']})"
        )
    return out


def render_report(report: SessionReport) -> str:
    """``helix-dbos inspect`` as text."""
    out = _session_lines(report)
    out += _hibernation_lines(report)
    out.append("")
    out += _pending_lines(report)
    out += _root_lines(report)
    out.append("")
    out.append(f"last {len(report.messages)} of {report.message_count} messages")
    out += [f"  {_message_line(m)}" for m in report.messages]
    out.append("")
    out.append("tree")
    out += [f"  {line}" for line in _tree_lines(report.tree, report.session.session_id)]
    if report.companions:
        out += ["", "companions"]
        out += [
            f"  {c['companion']}  {c['state']}  {c['sessionId']}  run {c.get('runId') or '-'}"
            for c in report.companions
        ]
    out += _adoption_lines(report)
    return "\n".join(out)


# -- the fleet ------------------------------------------------------------------------------


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
                    age(e.heartbeat_at, now) if e.pid is not None else "-",
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
