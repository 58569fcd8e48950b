"""Retry and rewind: a session goes back (or again) and a new run continues from there.

Both are one ``helix.lifecycle`` workflow. Its first step (exactly once) decides and commits,
in one transaction, the new conversation and session state; then the same workflow runs the
turn. The workflow is started before anything is written, so a crash at any point either left
nothing (ask again) or is recovered: the step is recorded and the turn goes on.

The conversation is changed by ``_reshape``: the rows that leave are marked (kept for audit,
see ``store/history.py``) and the rows that come back are re-appended as copies.

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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from dbos import DBOS, SetWorkflowID

from ..core.events import event
from ..core.llm import LLMResponse
from ..core.markers import entry_input_run, is_input_row, is_sub_agent_notification
from ..core.markers import mark_entry_input as _mark
from ..core.messages import Message
from ..core.pairing import not_executed_results, unpaired_tool_calls
from ..core.session import SessionState
from ..errors import (
    AgentAlreadyRunningError,
    AgentNotResumableError,
    HelixError,
    RequestValidationError,
    SessionNotFoundError,
)
from ..store.connection import AsyncConnection
from ..store.history import LogRow, conversation_at, list_checkpoints, load_rows, mark_rewound
from ..store.store import PENDING_CLEAR_ATTEMPTS, SessionStore
from . import names, notes
from .context import current, workflow_task
from .entry import ACTIVE_STATUSES
from .once import FENCED, exactly_once, step_connection
from .plan import plan_calls
from .records import (
    STASH_KEY,
    FencedResult,
    LifecycleApplied,
    LifecycleRefused,
    ModelStepResult,
    ToolCallRef,
    TurnOutcome,
)
from .resolve import resolve_call
from .steps import _pending_entries, _start_events, tool_result_message
from .turn import _Turn

__all__ = ["Op", "Reshape", "apply_lifecycle", "precheck", "run_lifecycle", "start_lifecycle"]

Op = Literal["retry", "rewind"]

#: Statuses a retry re-runs.
RETRYABLE = frozenset({"failed", "interrupted"})


# -- planning (pure) ------------------------------------------------------------------------


@dataclass
class Reshape:
    """The conversation a retry or rewind leaves, and what the new run starts from."""

    desired: list[LogRow | Message]
    """The new conversation: kept rows (re-appended as copies when out of place) and new rows."""
    batch: list[Any] | None = None
    """A restored assistant message's calls: the new run takes them over (no model call)."""
    ended: bool = False
    """The conversation ends with the model's final reply: no run continues."""


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


def _drained(state: SessionState, live: list[LogRow]) -> list[Message]:
    """Results for the session's pending calls whose tool_use has none yet (rule 6): a stored
    answer is used as given; an unanswered call was never executed."""
    open_calls = {tcid for tcid, _ in unpaired_tool_calls([r.message for r in live])}
    out: list[Message] = []
    for entry in sorted(state.pending.values(), key=lambda p: (p.run_id, p.index)):
        if entry.tool_call_id not in open_calls:
            continue
        item: ToolCallRef = {"toolCallId": entry.tool_call_id, "toolName": entry.tool_name}
        resolved = resolve_call(item, entry.dump(), abandon=False)
        if entry.submitted_at is None or "runInput" in resolved:
            # Unanswered, or an approved call whose tool never ran: it was not executed.
            resolved = {
                "toolCallId": entry.tool_call_id,
                "toolName": entry.tool_name,
                "ok": False,
                "errorCode": "not_executed",
            }
        out.append(tool_result_message(resolved))
    return out


def _heals(rows: list[LogRow | Message]) -> list[Message]:
    """``not_executed`` results for tool calls left without one (every provider needs one)."""
    return not_executed_results([r.message if isinstance(r, LogRow) else r for r in rows])


def plan_retry(
    state: SessionState,
    rows: list[LogRow],
    run_id: str,
    message: str | None,
    target: list[LogRow] | None,
) -> Reshape:
    """The retry's new conversation (rules 2 to 6; see the module docstring).

    ``target`` is the conversation at an explicit checkpoint, else ``None``.

    Raises:
        RequestValidationError: a message is needed (``cause: message``).
    """
    live = [r for r in rows if r.rewound_at is None]
    failed = state.run_id or ""
    drained = _drained(state, live)
    stash = state.metadata.get(STASH_KEY) or {}
    stashed = stash.get("message") if isinstance(stash, dict) else None

    def given(text: str) -> Message:
        return _mark(Message(role="user", content=text), run_id)

    def again(row: LogRow) -> Message:
        """A row re-appended as this run's own input (naming its original)."""
        meta = {**(row.message.meta or {}), "restoredFrom": row.message_id}
        return _mark(row.message.model_copy(update={"meta": meta}), run_id)

    if target is not None:
        kept_ids = {r.message_id for r in target}
        later = [r for r in live if r.message_id not in kept_ids]
        first_input = next((r for r in later if is_input_row(r.message)), None)
        if message is None and first_input is None:
            raise RequestValidationError(
                "Nothing after this checkpoint is user input to re-run: give a message",
                cause="message",
            )
        tail: list[LogRow | Message] = []
        for row in later:
            if is_sub_agent_notification(row.message):
                tail.append(row)  # never dropped, never input
            elif row is first_input:
                tail.append(given(message) if message is not None else again(row))
        if message is not None and first_input is None:
            tail.append(given(message))
        desired: list[LogRow | Message] = list(target)
        return Reshape(desired + _heals(desired) + tail)

    committed = any(r.run_id == failed and r.message.role == "assistant" for r in live)
    own = next(
        (
            i
            for i in range(len(live) - 1, -1, -1)
            if entry_input_run(live[i].message) == failed and is_input_row(live[i].message)
        ),
        None,
    )
    if stashed is not None:
        # Rule 5: drain first, then the stashed message (a given one replaces it).
        keep: list[LogRow | Message] = list(live)
        keep += drained
        return Reshape(keep + _heals(keep) + [given(message or stashed)])
    if not committed and own is not None:
        # Rules 2 and 4: rewind to just before the run's own input and re-append it (a given
        # message replaces it), with the rows after it.
        head: list[LogRow | Message] = list(live[:own])
        head += drained
        redo: list[LogRow | Message] = [given(message) if message is not None else again(live[own])]
        redo += [r for r in live[own + 1 :]]
        return Reshape(head + redo)
    if committed and message is None:
        raise RequestValidationError(
            "The failed run committed steps: a retry needs a message, as a new message does",
            cause="message",
            runId=failed,
        )
    keep = list(live)
    keep += drained
    entry: list[LogRow | Message] = [given(message)] if message is not None else []
    return Reshape(keep + _heals(keep) + entry)


def plan_rewind(agent: Any, target: list[LogRow]) -> Reshape:
    """The rewind's new conversation: exactly the checkpoint's, and where the run restarts."""
    last = target[-1].message if target else None
    if last is not None and last.role == "assistant":
        if not last.tool_calls:
            return Reshape(list(target), ended=True)
        plan = plan_calls(agent, last.tool_calls)
        if any(item["kind"] == "subagent" for item in plan):
            raise RequestValidationError(
                "This checkpoint's batch calls sub-agents, which already ran: rewind to the "
                "checkpoint after its results",
                cause="checkpoint_subagent_batch",
            )
        return Reshape(list(target), batch=list(last.tool_calls))
    desired: list[LogRow | Message] = list(target)
    return Reshape([*desired, *_heals(desired)])


# -- applying it ----------------------------------------------------------------------------


async def _reshape(
    conn: AsyncConnection,
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
    await mark_rewound(conn, [r.message_id for r in live[k:]], marker, datetime.now(UTC))
    new: list[Message] = []
    for item in desired[k:]:
        if isinstance(item, LogRow):
            meta = {**(item.message.meta or {}), "restoredFrom": item.message_id}
            new.append(item.message.model_copy(update={"meta": meta}))
        else:
            new.append(item)
    await current().store.append_messages(session_id, run_id, new, conn)
    return len(live) - k, len(new)


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
    conn = await step_connection()
    state = await ctx.store.get(session_id, conn)
    _refuse_status(state, op)
    rows = await load_rows(conn, session_id)
    live = [r for r in rows if r.rewound_at is None]
    target = None
    if checkpoint_id is not None:
        found = await list_checkpoints(conn, session_id, checkpoint_id)
        if not found:
            raise SessionNotFoundError(
                f"Session {session_id!r} has no checkpoint {checkpoint_id!r}",
                sessionId=session_id,
                checkpointId=checkpoint_id,
                cause="checkpoint",
            )
        target = conversation_at(rows, found[0])
    agent = ctx.registry.get(state.agent_type)
    if op == "rewind":
        assert target is not None
        plan = plan_rewind(agent, target)
    else:
        plan = plan_retry(state, rows, run_id, message, target)
    marker = {
        "op": op,
        "runId": run_id,
        **({"checkpointId": checkpoint_id} if checkpoint_id else {}),
    }
    rewound, restored = await _reshape(conn, session_id, run_id, live, plan.desired, marker)

    call_plan = plan_calls(agent, plan.batch) if plan.batch else []
    at = int(datetime.now(UTC).timestamp() * 1000)
    entries = _pending_entries(
        call_plan, run_id, at, int(agent.completed_tombstone_retention * 1000)
    )
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

    await ctx.store.update([session_id], commit, attempts=PENDING_CLEAR_ATTEMPTS, conn=conn)
    new_events = [
        event(
            "rewound",
            op=op,
            runId=run_id,
            rewoundMessages=rewound,
            restoredMessages=restored,
            **({"checkpointId": checkpoint_id} if checkpoint_id else {}),
        )
    ]
    if not plan.ended:
        new_events.append(event("turn_start", runId=run_id, agentType=state.agent_type))
    new_events += _start_events(call_plan, entries)
    if entries:
        new_events.append(event("suspended", toolCallIds=list(entries), reason="client_tool"))
    await ctx.store.append_events(session_id, run_id, new_events, conn)
    await notes.write(conn, notes.park_rows(session_id, state.root_session_id, call_plan, entries))
    committed: ModelStepResult | None = None
    if plan.batch:
        last = next(m for m in reversed(plan.desired) if isinstance(m, LogRow))
        response = LLMResponse(text=last.message.content, tool_calls=plan.batch)
        committed = {
            "response": response.model_dump(mode="json"),
            "llm": agent.llm.name,
            "plan": call_plan,
            "deadlines": {k: v.deadline_at for k, v in entries.items()},
        }
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
    async with store.engine.connect() as conn:
        rows = await load_rows(conn, session_id)
        found = await list_checkpoints(conn, session_id)
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
    async with current().store.engine.connect() as conn:
        if not await list_checkpoints(conn, session_id, checkpoint_id):
            raise SessionNotFoundError(
                f"Session {session_id!r} has no checkpoint {checkpoint_id!r}",
                sessionId=session_id,
                checkpointId=checkpoint_id,
                cause="checkpoint",
            )
