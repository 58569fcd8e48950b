"""The interrupt module: interrupt and abort a session tree, and resume entries.

``cancel_workflow`` flips a workflow to CANCELLED but does not wake a coroutine parked in
``recv``; so after cancelling, a stop message is sent on every awaited topic, and the parked
coroutine leaves at once. The pending state is then cleaned directly in the store (a
cancelled workflow's own steps can no longer run).
"""

from __future__ import annotations

from typing import Any

from ..core.events import event
from ..core.session import PendingCall, SessionState, batch_of, stop_pending, unanswered
from ..errors import AgentAlreadyRunningError, AgentNotResumableError
from ..observability import approval_metrics, metrics
from ..observability.log import log_event
from ..store.store import NoChange, now_ms
from . import names, notes, records
from .context import RuntimeContext
from .continuation import start_continuation
from .entry import ACTIVE_STATUSES
from .hibernation import child_ended, mark_of, waits_on_child
from .outcomes import stopped_outcome
from .records import HIBERNATED_KEY, STASH_KEY, EntryStash
from .wake import send_to_turn

__all__ = ["stash_entry", "stop_tree", "tree_of", "wake_stopped"]

Stopped = list[tuple[SessionState, PendingCall]]
"""The calls a stop cleared, each with the session that owned it."""


async def tree_of(ctx: RuntimeContext, session_id: str) -> list[SessionState]:
    """The session and every session below it, parents first."""
    top, *below = await ctx.store.tree(session_id)
    tree = [top]
    ids = {top.session_id}
    for state in below:  # created_at order puts parents before children
        if state.parent_session_id in ids:
            tree.append(state)
            ids.add(state.session_id)
    return tree


async def stop_tree(
    ctx: RuntimeContext, session_id: str, *, abort: bool, reason: str | None
) -> SessionState:
    """Interrupt (or abort) a session and every sub-agent below it.

    The stop is RECORDED first, then enforced, so it wins over everything in flight:

    1. in one transaction: every active session of the tree moves to ``interrupted`` (or
       ``failed`` with ``framework_cancelled``); the owners' pending calls and the root's
       ownership entries are cleared; ``stopped`` tombstones are written (a late submit
       answers ``run_stopped``); ``client_tool_abort`` is counted and ``turn_end`` written.
       A step of a stopped turn that commits after this is fenced and writes nothing.
    2. each stopped turn's workflow is cancelled, and every coroutine parked on one of the
       cleared calls is woken with a stop message (``cancel_workflow`` does not wake it).

    A crash between 1 and 2 leaves a PENDING workflow behind a stopped session: its next
    commit is fenced, and the reconciler (``heal``) cancels it.
    """
    tree = await tree_of(ctx, session_id)
    if not any(s.status in ACTIVE_STATUSES for s in tree):
        return tree[0]
    at = now_ms()
    root_id = tree[0].root_session_id
    ids = [s.session_id for s in tree]
    error = (
        {"code": "framework_cancelled", "message": reason or "The session was aborted"}
        if abort
        else None
    )
    outcome = "failed" if abort else "interrupted"

    def record(states: dict[str, SessionState]) -> tuple[Stopped, list[str]]:
        # Pure: it may run again on a retried transaction; it reports what it stopped.
        root = states[root_id]
        stopped: Stopped = []
        live = [states[sid] for sid in ids if states[sid].status in ACTIVE_STATUSES]
        if not live:
            raise NoChange((stopped, []))
        for s in live:
            stopped.extend((s, entry) for entry in stop_pending(s, root, at))
            s.metadata.pop(STASH_KEY, None)
            s.metadata.pop(HIBERNATED_KEY, None)  # nothing is left to continue
            # A persistent session's workflow is cancelled below: the next message starts anew.
            records.release_mark(s.metadata, s.workflow_id)
            s.status = "failed" if abort else "interrupted"
            s.error = error
        return stopped, [s.session_id for s in live]

    async def commit() -> tuple[dict[str, SessionState], list[str], Stopped]:
        saved, (stopped, ended) = await ctx.store.update(
            list(dict.fromkeys([root_id, *ids])), record
        )
        rows: list[dict[str, Any]] = []
        for state, entry in stopped:
            common: dict[str, Any] = {
                "session_id": state.session_id,
                "run_id": entry.run_id,
                "tool_call_id": entry.tool_call_id,
                "tool_name": entry.tool_name,
                "at_ms": at,
            }
            rows.append(metrics.counter_row(metrics.CLIENT_TOOL_ABORT, **common))
            rows.append(metrics.wait_row(wait_ms=at - entry.registered_at, **common))
        await ctx.store.record_usage(rows)
        cleared = [(state.session_id, entry) for state, entry in stopped]
        await notes.write(notes.stop_rows(root_id, cleared, at), in_commit=False)
        for sid in ended:
            await ctx.store.append_events(
                sid,
                saved[sid].run_id,
                [event("turn_end", outcome=outcome, **({"error": error} if error else {}))],
            )
        return saved, ended, stopped

    saved, ended, stopped = await ctx.store.transact(
        commit,
        retry_event="client_tool.clear_pending_retry",
        failed_event="client_tool.ownership_clear_failed",
        log_fields={"sessionIds": list(dict.fromkeys([root_id, *ids]))},
    )
    await _enforce_stop(ctx, [saved[sid] for sid in ended], stopped)
    for state, entry in stopped:
        log_event(
            "client_tool.aborted",
            sessionId=state.session_id,
            runId=entry.run_id,
            toolCallId=entry.tool_call_id,
            toolName=entry.tool_name,
            deadlineAt=entry.deadline_at,
            abort=abort,
        )
        if entry.submitted_at is None:  # an answered call was no longer waiting
            approval_metrics.record_outcome(entry.tool_name, "stopped", at - entry.registered_at)
    for sid in ended:
        # The stopped turn's workflow is cancelled and cannot log its own summary line.
        mine = [entry for state, entry in stopped if state.session_id == sid]
        log_event(
            "turn.summary",
            sessionId=sid,
            runId=saved[sid].run_id,
            outcome=outcome,
            stoppedCalls=len(mine),
            waitMs=sum(at - e.registered_at for e in mine),
        )
        approval_metrics.record_turn(outcome)
    top = saved.get(tree[0].session_id, tree[0])
    if top.parent_session_id is not None and top.session_id in ended:
        await _report_stopped_child(ctx, top)
    return top


async def _report_stopped_child(ctx: RuntimeContext, child: SessionState) -> None:
    """A sub-agent stopped alone: its parent reads it as stopped. A parent waiting live reads
    the cancelled workflow; one that hibernated waiting on it (or is about to) is told here,
    as a sub-agent's continuation tells it of an end (``hibernation.child_ended``). A
    companion's parent awaits no result: it is told nothing."""
    if names.is_companion_session(child.session_id, child.parent_session_id):
        return
    parent = await child_ended(child, stopped_outcome(child.run_id or ""))
    if parent is not None:
        await start_continuation(ctx, parent)


async def _enforce_stop(
    ctx: RuntimeContext,
    sessions: list[SessionState],
    stopped: list[tuple[SessionState, PendingCall]],
) -> None:
    """Cancel the stopped turns' workflows and wake every coroutine parked on a cleared call."""
    for state in sessions:
        if state.workflow_id:
            await ctx.dbos().cancel_workflow_async(state.workflow_id)
    for state, entry in stopped:
        # Every awaited topic, answered or not: an answer whose own wake-up was lost still
        # leaves the coroutine parked on its topic, and an extra message there is harmless.
        await wake_stopped(ctx, state.workflow_id, entry.run_id, entry.tool_call_id)


async def wake_stopped(
    ctx: RuntimeContext, workflow_id: str | None, run_id: str, tool_call_id: str
) -> None:
    """Send the stop message on one call's topic (idempotent per run and call)."""
    if workflow_id:
        await send_to_turn(
            ctx,
            workflow_id,
            {"kind": "stop"},
            names.tool_result_topic(tool_call_id),
            names.control_idempotency_key(run_id, tool_call_id, "stop"),
        )


async def stash_entry(ctx: RuntimeContext, root: SessionState, message: str, abandon: bool) -> str:
    """A new message over pending calls: stash it on the session and, if abandoning, wake.

    The parked turn drains the stored answers (abandoning the unanswered ones when asked),
    commits them, then the message, then runs one model call. Returns the run that will carry
    the message.

    Raises:
        AgentNotResumableError: a partial batch without ``abandon_pending`` (retryable), or a
            suspension that also awaits sub-agents.
        AgentAlreadyRunningError: the batch is already being drained.
    """
    tree = await tree_of(ctx, root.session_id)
    if any(s.pending for s in tree[1:]) or any(s.status in ACTIVE_STATUSES for s in tree[1:]):
        raise AgentNotResumableError(
            "The session also awaits sub-agents; a new message cannot be delivered now",
            sessionId=root.session_id,
        )
    at = now_ms()
    run_id = root.run_id or ""
    awaited = [
        p.tool_call_id for p in unanswered(batch_of(root.pending, run_id)) if not p.lapsed_by(at)
    ]
    if awaited and not abandon:
        raise AgentNotResumableError(
            f"The batch is partial: still awaiting {', '.join(awaited)}",
            sessionId=root.session_id,
            awaitedToolCallIds=awaited,
            retryable=True,
        )

    def stash(states: dict[str, SessionState]) -> list[str]:
        s = states[root.session_id]
        if (
            s.status != "suspended_client_tool"
            or not batch_of(s.pending, run_id)
            or s.run_id != run_id
        ):
            raise NoChange(None)
        if STASH_KEY in s.metadata:
            raise NoChange(None)
        stashed: EntryStash = {"message": message, "abandonPending": abandon, "runId": run_id}
        s.metadata[STASH_KEY] = stashed
        mark = mark_of(s)
        if mark is not None and abandon and not waits_on_child(mark):
            # An abandoned batch waits no more: continue it now (a turn waiting on its
            # sub-agent drains the batch once the sub-agent ends).
            mark["dueAt"] = 0
        # Wake every call of the batch: the coroutine may be parked on an answered call whose
        # own wake-up was lost. A stored answer is kept either way (the drain reads the store).
        return [p.tool_call_id for p in batch_of(s.pending, run_id)]

    saved, to_wake = await ctx.store.update([root.session_id], stash)
    if to_wake is None:
        raise AgentAlreadyRunningError(
            "The turn is already continuing; send the message when it ends",
            sessionId=root.session_id,
        )
    stashed_on = saved[root.session_id]
    if mark_of(stashed_on) is not None:
        # A hibernated turn: no workflow to wake; an abandon continues it now, a drain-first
        # message waits in the row for the batch's last answer (or its deadline).
        if abandon:
            await start_continuation(ctx, stashed_on)
    elif abandon and root.workflow_id:
        for tcid in to_wake:
            await send_to_turn(
                ctx,
                root.workflow_id,
                {"kind": "abandon"},
                names.tool_result_topic(tcid),
                names.control_idempotency_key(run_id, tcid, "abandon"),
            )
    return names.next_run_id(run_id)
