"""Companions: a parent's sends, status reads and ends, as steps of the parent's turn.

A companion is a persistent agent attached to a parent session. Its session
(``names.companion_session_id``) is created by the first send, under the parent's root, and
lives across the parent's turns; its turns run in its own ``helix.persistent`` workflow.

A send (``companion__sendMessage``) is ONE recorded DBOS step of the parent's turn
(``names.COMPANION_SEND_STEP``). It claims the companion for the run derived from the
parent's run and call (``names.companion_run_id``) and hands the message over with
``persistent.deliver``, in one transaction that also fences the parent's run and records the
companion reference on the parent's row. A re-executed send (a crash mid-step) finds the
companion on that run already and delivers nothing again: one delivery per send. The send
then waits, within the parent agent's ``companion_delivery_timeout``, for the companion's run
to start: its own new workflow is started, or the live workflow took the message from its
inbox (DBOS recorded the ``recv``). The outcome is the seeds' ``CompanionDeliveryOutcome``
(docs/companions.md has the table).
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from dbos import DBOS

from ...core.clock import now_ms
from ...core.companions import (
    END_TOOL,
    SEND_TOOL,
    STATUS_TOOL,
    CompanionDeliveryOutcome,
    CompanionNotDeliveredReason,
)
from ...core.owner import SessionOwner
from ...core.session import SessionState
from ...errors import AgentAlreadyRunningError, ErrorCode, HelixError
from ...observability.log import log_event
from ...store import Fenced, NoChange, guard
from .. import names, records
from .._commits.opening import ACTIVE_STATUSES
from .._context import RuntimeContext, current, rooms
from ..records import ServerToolResult
from . import persistent

__all__ = [
    "companion_state",
    "companion_views",
    "companions_of",
    "end_companion",
    "end_companions",
    "run_companion_tool",
    "send",
]

_LIVE = frozenset({"PENDING", "ENQUEUED"})
_POLL_SECONDS = 0.1


async def run_companion_tool(
    session_id: str,
    run_id: str,
    root_session_id: str,
    agent_type: str,
    item: dict[str, Any],
) -> ServerToolResult:
    """A ``companion__`` call of a parent's turn, as a recorded step: its tool result."""
    name, call = str(item["input"].get("companion", "")), str(item["toolCallId"])
    if item["toolName"] == SEND_TOOL:
        message = str(item["input"].get("message", ""))
        return await _send_step(
            session_id, run_id, root_session_id, agent_type, call, name, message
        )
    return await _op_step(session_id, agent_type, str(item["toolName"]), name)


@DBOS.step(name=names.COMPANION_SEND_STEP)
async def _send_step(
    session_id: str,
    run_id: str,
    root_session_id: str,
    agent_type: str,
    tool_call_id: str,
    companion: str,
    message: str,
) -> ServerToolResult:
    """``companion__sendMessage`` (recorded): the delivery outcome as a successful result,
    or ``aborted`` when the parent's run was stopped (nothing handed over)."""
    ctx = current()
    try:
        outcome = await send(
            ctx, session_id, run_id, root_session_id, agent_type, tool_call_id, companion, message
        )
    except Fenced:
        # The parent's run was stopped or superseded: nothing was handed over.
        return {"ok": False, "error": "The turn was stopped.", "errorCode": "aborted"}
    log_event(
        "companion.send",
        sessionId=session_id,
        runId=run_id,
        companion=companion,
        delivered=outcome["delivered"],
        reason=outcome.get("reason"),
    )
    return {"ok": True, "result": dict(outcome)}


@DBOS.step(name=names.COMPANION_OP_STEP)
async def _op_step(session_id: str, agent_type: str, tool: str, companion: str) -> ServerToolResult:
    """``companion__status`` or ``companion__end`` (recorded); an unknown name is a failed
    result the model reads."""
    ctx = current()
    if ctx.registry.get(agent_type).companion(companion) is None:
        return _unknown(agent_type, companion)
    sid = names.companion_session_id(session_id, companion)
    if tool == STATUS_TOOL:
        return {"ok": True, "result": await companion_state(ctx, sid, companion)}
    assert tool == END_TOOL
    ended = await end_companion(ctx, sid, "ended by its parent")
    return {"ok": True, "result": {"companion": companion, "ended": ended}}


def _unknown(agent_type: str, companion: str) -> ServerToolResult:
    """The failed result of a status read or end naming no declared companion."""
    return {
        "ok": False,
        "error": f"Agent {agent_type!r} has no companion named {companion!r}",
        "errorCode": ErrorCode.VALIDATION_FAILED,
    }


def _not_delivered(
    reason: CompanionNotDeliveredReason, detail: dict[str, Any] | None = None
) -> CompanionDeliveryOutcome:
    outcome: CompanionDeliveryOutcome = {"delivered": False, "reason": reason}
    if detail is not None:
        outcome["errorDetail"] = detail
    return outcome


def _detail(code: str, message: str, retryable: bool = False) -> dict[str, Any]:
    return {"code": code, "message": message, "retryable": retryable}


async def send(
    ctx: RuntimeContext,
    session_id: str,
    run_id: str,
    root_session_id: str,
    agent_type: str,
    tool_call_id: str,
    companion: str,
    message: str,
) -> CompanionDeliveryOutcome:
    """Hand ``message`` to the parent ``session_id``'s companion ``companion`` and wait for
    the companion's run to start; the delivery outcome.

    Raises:
        Fenced: the parent's run ``run_id`` is stopped or superseded (nothing was written).
    """
    parent_agent = ctx.registry.get(agent_type)
    mate = parent_agent.companion(companion)
    if mate is None:
        declared = ", ".join(repr(c.name) for c in parent_agent.companions) or "none"
        return _not_delivered(
            "no_resume_config",
            _detail(
                ErrorCode.VALIDATION_FAILED,
                f"No companion named {companion!r} is configured (declared: {declared})",
            ),
        )
    sid = names.companion_session_id(session_id, companion)
    run = names.companion_run_id(run_id, tool_call_id)
    state = await ctx.store.load(sid)
    if state is not None and _claimed_by(state.run_id, run):
        # This very send claimed it before (a re-executed step): never deliver twice.
        workflow_id = await _ensure_started(state, run)
    else:
        refused = _refusal(state, message)
        if refused is not None:
            return refused
        try:
            workflow_id = await _deliver(
                ctx, session_id, run_id, root_session_id, mate.name, sid, run, message
            )
        except AgentAlreadyRunningError:
            return _not_delivered("child_busy")
        except Fenced:
            raise
        except HelixError as exc:
            return _not_delivered(
                "child_entry_failed", _detail(exc.code, exc.message, exc.retryable)
            )
    if workflow_id is None:
        return _not_delivered("child_exited")
    await _ensure_runner(ctx, sid, workflow_id != names.persistent_workflow_id(sid, run))
    outcome = await _await_start(sid, run, workflow_id, parent_agent.companion_delivery_timeout)
    outcome["companionSessionId"] = sid
    outcome["runId"] = run
    return outcome


def _claimed_by(run_id: str | None, run: str) -> bool:
    """Whether the row is on ``run`` (or on a continuation of it)."""
    return run_id is not None and (run_id == run or run_id.startswith(f"{run}:"))


def _refusal(state: SessionState | None, message: str) -> CompanionDeliveryOutcome | None:
    """Why a new send cannot enter the companion, read before its transaction; ``None``: try."""
    if state is not None:
        if records.COMPANION_ENDED_KEY in state.metadata:
            return _not_delivered("child_exited")
        if state.status in ACTIVE_STATUSES:
            return _not_delivered("child_busy")
        if state.status == "failed" and (state.error or {}).get("code") == "framework_cancelled":
            # Aborted on its own: a send does not undo an abort (an operator's retry does).
            error = state.error or {}
            return _not_delivered(
                "child_not_running",
                _detail("framework_cancelled", str(error.get("message", "aborted"))),
            )
    if not message.strip():
        return _not_delivered(
            "child_entry_failed",
            _detail(ErrorCode.VALIDATION_FAILED, "The companion's entry needs a non-empty message"),
        )
    return None


async def _deliver(
    ctx: RuntimeContext,
    parent_id: str,
    parent_run: str,
    root_id: str,
    companion: str,
    sid: str,
    run: str,
    message: str,
) -> str:
    """``persistent.deliver`` to the companion, fenced on the parent's run and recording the
    companion reference on the parent's row in the same transaction; the workflow that takes
    the run."""
    store = ctx.store

    async def fence_and_refer() -> None:
        def refer(states: dict[str, SessionState]) -> None:
            parent = states[parent_id]
            guard(parent, parent_run, ("running",))
            refs = parent.metadata.setdefault(records.COMPANIONS_KEY, {})
            if companion in refs:
                raise NoChange(None)
            refs[companion] = {"sessionId": sid, "since": now_ms()}

        await store.update([parent_id], refer)

    parent = await store.get(parent_id)
    entered = await persistent.deliver(
        ctx,
        sid,
        companion,
        message,
        run,
        owner=SessionOwner(parent.principal, parent.tenant),
        parent=(parent_id, root_id),
        within=fence_and_refer,
    )
    return entered.workflow_id


async def _ensure_runner(ctx: RuntimeContext, sid: str, live: bool) -> None:
    """A message to a live workflow whose process is gone: adopt it now (the fleet), not at
    the next sweep. In a context of its own: an adoption starts workflows, which DBOS refuses
    inside a step. A failure leaves it to the sweep (the wait then may not see the start)."""
    if not live or ctx.fleet is None:
        return
    try:
        await asyncio.create_task(ctx.fleet.ensure_runner(sid), context=contextvars.Context())
    except Exception as exc:  # the sweep adopts it later; the send still reports what it saw
        log_event("companion.adopt_failed", sessionId=sid, error=type(exc).__name__)


async def _ensure_started(state: SessionState, run: str) -> str | None:
    """A re-executed send: the workflow that takes ``run`` (its own new workflow started
    again by id if the crash came before its start); ``None`` if the run was stopped first."""
    workflow_id = state.workflow_id
    if workflow_id == names.persistent_workflow_id(state.session_id, run):
        if state.run_id == run and state.status in ACTIVE_STATUSES:
            await persistent.start_persistent(state, run, workflow_id)
        elif not await _status(workflow_id):
            return None
    return workflow_id


async def _await_start(
    sid: str, run: str, workflow_id: str, timeout: float
) -> CompanionDeliveryOutcome:
    """Wait for the companion's run ``run`` to start in ``workflow_id``: started with it (a
    new workflow), or taken from the inbox (DBOS recorded the ``recv``)."""
    own = workflow_id == names.persistent_workflow_id(sid, run)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        status = await _status(workflow_id)
        if own and status is not None:
            return {"delivered": True}
        if not own and await _took(workflow_id, run):
            return {"delivered": True}
        if status is not None and status not in _LIVE:
            # Its loop ended before it took the message (read again: it may have just now).
            return (
                {"delivered": True}
                if await _took(workflow_id, run)
                else _not_delivered("child_exited")
            )
        if loop.time() >= deadline:
            return _not_delivered("child_start_unconfirmed")
        await asyncio.sleep(_POLL_SECONDS)


async def _status(workflow_id: str) -> str | None:
    found = await DBOS.list_workflows_async(
        workflow_ids=[workflow_id], load_input=False, load_output=False
    )
    return str(found[0].status) if found else None


async def _took(workflow_id: str, run: str) -> bool:
    """Whether ``workflow_id`` took the inbox message of ``run`` (a recorded ``recv``)."""
    steps = await DBOS.list_workflow_steps_async(workflow_id)
    for step in reversed(steps):
        output = step.get("output")
        if (
            step.get("function_name") == "DBOS.recv"
            and isinstance(output, dict)
            and output.get("kind") == "turn"
            and output.get("runId") == run
        ):
            return True
    return False


async def companion_state(ctx: RuntimeContext, sid: str, companion: str) -> dict[str, Any]:
    """A companion's state as its parent (and ``/status``) reads it."""
    state = await ctx.store.load(sid)
    view: dict[str, Any] = {"companion": companion, "sessionId": sid}
    if state is None:
        return {**view, "state": "not_started"}
    return {
        **view,
        "state": _state_word(state),
        "status": state.status,
        "runId": state.run_id,
        "error": state.error,
    }


def _state_word(state: SessionState) -> str:
    """``ended``, ``running``, ``waiting`` (on client calls), ``idle`` (its workflow waits on
    its inbox), ``hibernated`` (none does: a send starts one) or ``stopped``."""
    if records.COMPANION_ENDED_KEY in state.metadata:
        return "ended"
    if state.status == "running":
        return "running"
    if state.status == "suspended_client_tool":
        return "waiting"
    if state.status == "interrupted" or (state.error or {}).get("code") == "framework_cancelled":
        return "stopped"
    return "idle" if records.PERSISTENT_KEY in state.metadata else "hibernated"


def companion_views(top: SessionState, tree: list[SessionState]) -> list[dict[str, Any]]:
    """The companions of ``top`` with their state, from its tree's rows (``/status``)."""
    rows = {s.session_id: s for s in tree}
    views = []
    for name, sid in sorted(companions_of(top).items()):
        state = rows.get(sid)
        view: dict[str, Any] = {"companion": name, "sessionId": sid}
        if state is None:
            views.append({**view, "state": "not_started"})
            continue
        views.append(
            {**view, "state": _state_word(state), "status": state.status, "runId": state.run_id}
        )
    return views


def companions_of(state: SessionState) -> dict[str, str]:
    """The companions a session's row refers to: ``{name: session id}``."""
    refs = state.metadata.get(records.COMPANIONS_KEY) or {}
    return {name: str(ref.get("sessionId")) for name, ref in refs.items() if isinstance(ref, dict)}


async def end_companion(ctx: RuntimeContext, sid: str, reason: str) -> bool:
    """End the companion ``sid`` for good: its running turn is stopped, its idle workflow's
    claim removed (it ends at its idle TTL), and later sends answer ``child_exited``.
    ``False`` if it never started."""
    state = await ctx.store.load(sid)
    if state is None:
        return False
    if state.status in ACTIVE_STATUSES:
        await rooms.stop_tree(ctx, sid, abort=False, reason=reason)

    def end(states: dict[str, SessionState]) -> None:
        s = states[sid]
        if records.COMPANION_ENDED_KEY in s.metadata:
            raise NoChange(None)
        s.metadata[records.COMPANION_ENDED_KEY] = {"at": now_ms(), "reason": reason}
        s.metadata.pop(records.PERSISTENT_KEY, None)

    await ctx.store.update([sid], end)
    log_event("companion.ended", sessionId=sid, reason=reason)
    return True


async def end_companions(ctx: RuntimeContext, session_id: str, reason: str) -> list[str]:
    """End every companion of ``session_id`` (the parent's session ended); their ids."""
    state = await ctx.store.load(session_id)
    if state is None:
        return []
    ended = []
    for sid in companions_of(state).values():
        if await end_companion(ctx, sid, reason):
            ended.append(sid)
    return ended


rooms.run_companion_tool = run_companion_tool
