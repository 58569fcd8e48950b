"""Retry and rewind: a session goes back (or again) and a new run continues from there.

Both are one ``helix.lifecycle`` workflow. Its first step (exactly once) decides and commits,
in one transaction, the new conversation and session state; then the same workflow runs the
turn. The workflow is started before anything is written, so a crash at any point either left
nothing (ask again) or is recovered: the step is recorded and the turn goes on.

The conversation is changed by ``_reshape``: the rows that leave are marked (kept for audit,
see ``store/history.py``) and the rows that come back are re-appended as copies. What a retry
leaves is planned by the pure steps of ``_operations/retry_plan.py``.

What a retry does (the rules the lifecycle page documents):

1. Nothing to retry: a session that is running or parked is refused ``state_already_running``;
   one that completed (or never ran) is refused ``state_not_resumable``. Only a ``failed`` or
   ``interrupted`` session is retried.
2. Its run committed no step: the log is kept; the run's own input row (its entry-input
   marker, never found by role) is taken out and re-appended for the new run, with the rows
   after it. No message is needed; a given message replaces that input.
3. Its run committed steps: everything is kept and a message is needed, as for a new message.
4. A resumed run (``with_message``) whose drain appended its marked input is rule 2 for it.
5. A message still stashed on the session (a run failed before draining it) is drained: the
   stored answers first, then the stash's message (a given message replaces it).
6. Answered calls still pending are drained before the input, never after it.

With ``checkpoint_id`` a retry keeps the conversation as it was at that checkpoint and re-runs
the first user input after it (sub-agent completion notifications are never input; they are
re-appended, never dropped); a message replaces that input; with neither it is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from dbos import DBOS, SetWorkflowID

from ...core.events import event
from ...core.llm import LLMResponse
from ...core.markers import is_sub_agent_notification
from ...core.messages import Message
from ...core.session import PendingCall, SessionState
from ...errors import (
    AgentAlreadyRunningError,
    AgentNotResumableError,
    HelixError,
    RequestValidationError,
    SessionNotFoundError,
)
from ...store import (
    PENDING_CLEAR_ATTEMPTS,
    LogRow,
    SessionStore,
    conversation_at,
    list_checkpoints,
    load_rows,
    mark_rewound,
)
from .. import names
from .._commits.once import FENCED, exactly_once
from .._commits.opening import ACTIVE_STATUSES
from .._context import current, workflow_task
from .._notifications import outbox_rows
from .._triage import plan_calls
from .._turn.steps import pending_entries, start_events
from .._turn.workflow import _Turn
from ..records import (
    STASH_KEY,
    FencedResult,
    LifecycleApplied,
    LifecycleRefused,
    ModelStepResult,
    PlanItem,
    TurnOutcome,
)
from .retry_plan import Reshape, heals, plan_retry

__all__ = ["Op", "Reshape", "apply_lifecycle", "precheck", "run_lifecycle", "start_lifecycle"]

Op = Literal["retry", "rewind"]

#: Statuses a retry re-runs.
RETRYABLE = frozenset({"failed", "interrupted"})


# -- planning (pure) ------------------------------------------------------------------------


def _refuse_status(state: SessionState, op: Op) -> None:
    if state.status in ACTIVE_STATUSES and op == "retry":
        raise AgentAlreadyRunningError(
            f"Session {state.session_id!r} has a turn {state.status}: nothing to retry",
            sessionId=state.session_id,
            runId=state.run_id,
        )
    if state.status == "running":
        raise AgentAlreadyRunningError(
            f"Session {state.session_id!r} has a turn running; interrupt it first",
            sessionId=state.session_id,
            runId=state.run_id,
        )
    if op == "retry" and state.status not in RETRYABLE:
        raise AgentNotResumableError(
            f"Session {state.session_id!r} is {state.status}: nothing to retry "
            "(send the next message with start)",
            sessionId=state.session_id,
            status=state.status,
        )
    if not state.is_root:
        raise RequestValidationError(
            "Retry and rewind act on a root session", cause="not_root", sessionId=state.session_id
        )


def plan_rewind(agent: Any, target: list[LogRow], live: list[LogRow] | None = None) -> Reshape:
    """The rewind's new conversation: the checkpoint's, and where the run restarts. The
    sub-agent (companion) notifications of ``live`` after it are re-appended, never dropped;
    before a restored batch's call, as no row may stand between a call and its result."""
    kept = {r.message_id for r in target}
    later = [
        r for r in live or () if r.message_id not in kept and is_sub_agent_notification(r.message)
    ]
    last = target[-1].message if target else None
    if last is not None and last.role == "assistant":
        if not last.tool_calls:
            return Reshape([*target, *later], ended=True)
        plan = plan_calls(agent, last.tool_calls)
        if any(item["kind"] in ("subagent", "companion") for item in plan):
            raise RequestValidationError(
                "This checkpoint's batch calls sub-agents or companions, which already ran: "
                "rewind to the checkpoint after its results",
                cause="checkpoint_subagent_batch",
            )
        return Reshape([*target[:-1], *later, target[-1]], batch=list(last.tool_calls))
    desired: list[LogRow | Message] = list(target)
    return Reshape([*desired, *heals(desired), *later])


# -- applying it ----------------------------------------------------------------------------


async def _reshape(
    session_id: str,
    run_id: str,
    live: list[LogRow],
    desired: list[LogRow | Message],
    marker: dict[str, Any],
) -> tuple[int, int]:
    """Make the conversation ``desired``: rows past the common prefix leave (marked), and the
    rest of ``desired`` is appended in order (kept rows as copies naming their original)."""
    k = 0
    while (
        k < len(live)
        and k < len(desired)
        and isinstance(desired[k], LogRow)
        and desired[k].message_id == live[k].message_id  # type: ignore[union-attr]
    ):
        k += 1
    await mark_rewound([r.message_id for r in live[k:]], marker, datetime.now(UTC))
    new: list[Message] = []
    for item in desired[k:]:
        if isinstance(item, LogRow):
            meta = {**(item.message.meta or {}), "restoredFrom": item.message_id}
            new.append(item.message.model_copy(update={"meta": meta}))
        else:
            new.append(item)
    await current().store.append_messages(session_id, run_id, new)
    return len(live) - k, len(new)


def _no_checkpoint(session_id: str, checkpoint_id: str) -> SessionNotFoundError:
    """The refusal of a checkpoint the session does not have."""
    return SessionNotFoundError(
        f"Session {session_id!r} has no checkpoint {checkpoint_id!r}",
        sessionId=session_id,
        checkpointId=checkpoint_id,
        cause="checkpoint",
    )


async def _target(
    session_id: str, rows: list[LogRow], checkpoint_id: str | None
) -> list[LogRow] | None:
    """The conversation at ``checkpoint_id`` (``None`` without one).

    Raises:
        SessionNotFoundError: the session has no such checkpoint.
    """
    if checkpoint_id is None:
        return None
    found = await list_checkpoints(session_id, checkpoint_id)
    if not found:
        raise _no_checkpoint(session_id, checkpoint_id)
    return conversation_at(rows, found[0])


def _plan(
    agent: Any,
    state: SessionState,
    rows: list[LogRow],
    run_id: str,
    op: Op,
    message: str | None,
    target: list[LogRow] | None,
) -> Reshape:
    """The op's plan: a rewind to ``target``, or a retry (from ``target`` if given)."""
    if op == "rewind":
        assert target is not None
        return plan_rewind(agent, target, rows)
    return plan_retry(state, rows, run_id, message, target)


def _commit(
    session_id: str,
    run_id: str,
    workflow_id: str,
    plan: Reshape,
    entries: dict[str, PendingCall],
) -> Callable[[dict[str, SessionState]], None]:
    """The session's new state: the new run owns it, with the restored batch's calls pending
    (a session already running again is refused)."""
    restored_ids = {c.id for c in plan.batch or []}

    def commit(states: dict[str, SessionState]) -> None:
        s = states[session_id]
        if s.status in ACTIVE_STATUSES:
            raise AgentAlreadyRunningError(
                f"Session {session_id!r} has a turn {s.status}", sessionId=session_id
            )
        for tcid in list(s.pending):
            s.ownership.pop(tcid, None)  # discarded: a late submit answers unknown_tool_call
        s.pending = dict(entries)
        for tcid in restored_ids:
            s.completed.pop(tcid, None)
        for tcid in entries:
            s.ownership[tcid] = session_id
        s.metadata.pop(STASH_KEY, None)
        s.error = None
        s.run_id = run_id
        s.workflow_id = workflow_id
        s.status = "completed" if plan.ended else "suspended_client_tool" if entries else "running"

    return commit


def _restored_step(
    agent: Any, plan: Reshape, call_plan: list[PlanItem], entries: dict[str, PendingCall]
) -> ModelStepResult | None:
    """A restored batch in the shape of a model step's answer (``None`` without one)."""
    if not plan.batch:
        return None
    last = next(m for m in reversed(plan.desired) if isinstance(m, LogRow))
    response = LLMResponse(text=last.message.content, tool_calls=plan.batch)
    return {
        "response": response.model_dump(mode="json"),
        "llm": agent.llm.name,
        "plan": call_plan,
        "deadlines": {k: v.deadline_at for k, v in entries.items()},
    }


@exactly_once(names.LIFECYCLE_APPLY_STEP, "lifecycle")
async def apply_lifecycle(
    session_id: str,
    run_id: str,
    op: Op,
    message: str | None,
    checkpoint_id: str | None,
    workflow_id: str,
) -> LifecycleApplied:
    """Decide and commit a retry or rewind in one transaction (exactly once).

    Returns ``{"ended", "committed"}``: ``committed`` is a restored batch in the shape of a
    model step's answer (the turn starts from it), or ``None``.

    Raises:
        HelixError: a typed refusal; nothing is written.
    """
    ctx = current()
    state = await ctx.store.get(session_id)
    _refuse_status(state, op)
    rows = await load_rows(session_id)
    live = [r for r in rows if r.rewound_at is None]
    target = await _target(session_id, rows, checkpoint_id)
    agent = ctx.registry.get(state.agent_type)
    plan = _plan(agent, state, rows, run_id, op, message, target)
    checkpoint = {"checkpointId": checkpoint_id} if checkpoint_id else {}
    marker = {"op": op, "runId": run_id, **checkpoint}
    rewound, restored = await _reshape(session_id, run_id, live, plan.desired, marker)

    call_plan = plan_calls(agent, plan.batch) if plan.batch else []
    at = int(datetime.now(UTC).timestamp() * 1000)
    entries = pending_entries(
        call_plan, run_id, at, int(agent.completed_tombstone_retention * 1000)
    )
    commit = _commit(session_id, run_id, workflow_id, plan, entries)
    await ctx.store.update([session_id], commit, attempts=PENDING_CLEAR_ATTEMPTS)
    new_events = [
        event(
            "rewound",
            op=op,
            runId=run_id,
            rewoundMessages=rewound,
            restoredMessages=restored,
            **checkpoint,
        )
    ]
    if not plan.ended:
        new_events.append(event("turn_start", runId=run_id, agentType=state.agent_type))
    new_events += start_events(call_plan, entries)
    if entries:
        new_events.append(event("suspended", toolCallIds=list(entries), reason="client_tool"))
    await ctx.store.append_events(session_id, run_id, new_events)
    await outbox_rows.write(
        outbox_rows.park_rows(session_id, state.root_session_id, call_plan, entries)
    )
    committed = _restored_step(agent, plan, call_plan, entries)
    return {"ended": plan.ended, "committed": committed, "agentType": state.agent_type}


class _RestoredTurn(_Turn):
    """A turn whose first step is a restored batch: no model call, no invented result."""

    __slots__ = ("committed",)

    def __init__(self, *args: Any, committed: ModelStepResult | None) -> None:
        super().__init__(*args)
        self.committed = committed

    async def _model(self, step: int) -> ModelStepResult | FencedResult:
        if step == 0 and self.committed is not None:
            # Handed over once: the turn does not keep the restored answer while it parks.
            committed, self.committed = self.committed, None
            return committed
        return await super()._model(step)


#: In-process waiters for a lifecycle workflow's first step: workflow id -> its outcome.
_applied: dict[str, asyncio.Future[Any]] = {}


def _signal(workflow_id: str, outcome: Any) -> None:
    waiter = _applied.get(workflow_id)
    if waiter is not None and not waiter.done():
        waiter.set_result(outcome)


@DBOS.workflow(name=names.LIFECYCLE_WORKFLOW)
async def run_lifecycle(
    session_id: str,
    run_id: str,
    op: Op,
    message: str | None,
    checkpoint_id: str | None,
    layout: int = 1,
) -> TurnOutcome | LifecycleRefused:
    """Apply a retry or rewind, then run the turn it starts (if the conversation goes on),
    in step ``layout`` (``names.TURN_LAYOUT``; 1 for a workflow recorded before the
    argument)."""
    with workflow_task():
        return await _lifecycle(session_id, run_id, op, message, checkpoint_id, layout)


async def _lifecycle(
    session_id: str,
    run_id: str,
    op: Op,
    message: str | None,
    checkpoint_id: str | None,
    layout: int,
) -> TurnOutcome | LifecycleRefused:
    """``run_lifecycle``'s body."""
    workflow_id = DBOS.workflow_id or ""
    try:
        applied = await apply_lifecycle(session_id, run_id, op, message, checkpoint_id, workflow_id)
    except HelixError as exc:
        _signal(workflow_id, exc)
        return {"outcome": "refused", "error": {"code": exc.code, "message": exc.message}}
    _signal(workflow_id, applied)
    # Never fenced: the step has no guard (it refuses typed instead).
    assert FENCED not in applied
    if applied["ended"]:
        return {"outcome": "completed", "text": "", "output": None, "error": None, "runId": run_id}
    state = await current().store.get(session_id)
    turn = _RestoredTurn(
        session_id,
        run_id,
        applied["agentType"],
        state.root_session_id,
        layout,
        committed=applied["committed"],
    )
    return await turn.run()


async def precheck(state: SessionState, op: Op) -> None:
    """The typed refusals a caller gets before anything starts (the step checks again)."""
    _refuse_status(state, op)


async def start_lifecycle(
    session_id: str,
    run_id: str,
    op: Op,
    message: str | None,
    checkpoint_id: str | None,
    timeout: float = 60.0,
) -> tuple[str, Any]:
    """Start the lifecycle workflow and wait for its first step: ``(workflow id, handle)``.

    Raises:
        HelixError: the step's typed refusal (nothing was written).
    """
    workflow_id = names.turn_workflow_id(session_id, run_id)
    waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    _applied[workflow_id] = waiter
    try:
        with SetWorkflowID(workflow_id):
            handle = await DBOS.start_workflow_async(
                run_lifecycle,
                session_id,
                run_id,
                op,
                message,
                checkpoint_id,
                layout=names.TURN_LAYOUT,
            )
        outcome = await asyncio.wait_for(waiter, timeout)
    finally:
        _applied.pop(workflow_id, None)
    if isinstance(outcome, HelixError):
        raise outcome
    return workflow_id, handle


async def checkpoints_of(store: SessionStore, session_id: str) -> list[dict[str, Any]]:
    """The session's checkpoints, newest first: ``{checkpointId, runId, step, createdAt,
    messageCount, kind}``. ``messageCount`` and ``step`` (model answers) describe the
    conversation a rewind to it restores.

    Raises:
        SessionNotFoundError: no such session.
    """
    await store.get(session_id)
    async with store.reading():
        rows = await load_rows(session_id)
        found = await list_checkpoints(session_id)
    out: list[dict[str, Any]] = []
    for cp in found:
        at = conversation_at(rows, cp)
        out.append(
            {
                "checkpointId": cp.checkpoint_id,
                "runId": cp.run_id,
                "step": sum(1 for r in at if r.message.role == "assistant"),
                "createdAt": cp.created_at.isoformat(),
                "messageCount": len(at),
                "kind": cp.kind,
            }
        )
    return out


async def require_checkpoint(session_id: str, checkpoint_id: str) -> None:
    """Refuse an unknown checkpoint before anything is stopped or written.

    Raises:
        SessionNotFoundError: the session has no such checkpoint.
    """
    async with current().store.reading():
        if not await list_checkpoints(session_id, checkpoint_id):
            raise _no_checkpoint(session_id, checkpoint_id)
