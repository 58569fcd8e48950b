"""The interrupt module: interrupt and abort a session tree, and resume entries.

``cancel_workflow`` flips a workflow to CANCELLED but does not wake a coroutine parked in
``recv``; so after cancelling, a stop message is sent on every awaited topic, and the parked
coroutine leaves at once. The pending state is then cleaned directly in the store (a
cancelled workflow's own steps can no longer run).
"""

from __future__ import annotations

from typing import Any, Literal

from ...core.events import event
from ...core.session import PendingCall, SessionState, batch_of, stop_pending, unanswered
from ...errors import AgentAlreadyRunningError, AgentNotResumableError
from ...observability import approval_metrics, metrics
from ...observability.log import log_event
from ...store import NoChange, now_ms
from .. import names, records
from .._commits.opening import ACTIVE_STATUSES
from .._context import RuntimeContext, rooms
from .._hibernated.continuation import start_continuation
from .._notifications import outbox_rows
from .._turn.hibernation import child_ended, mark_of, waits_on_child
from .._turn.outcomes import stopped_outcome
from .._turn.wake import send_to_turn
from ..records import HIBERNATED_KEY, STASH_KEY, EntryStash

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
    error = _stop_error(abort, reason)
    outcome = "failed" if abort else "interrupted"

    def record(states: dict[str, SessionState]) -> tuple[Stopped, list[str]]:
        # Pure: it may run again on a retried transaction; it reports what it stopped.
        return _record_stop(states, root_id, ids, at, error)

    async def commit() -> tuple[dict[str, SessionState], list[str], Stopped]:
        saved, (stopped, ended) = await ctx.store.update(
            list(dict.fromkeys([root_id, *ids])), record
        )
        rows = _stop_usage_rows(stopped, at)
        await ctx.store.record_usage(rows)
        cleared = [(state.session_id, entry) for state, entry in stopped]
        await outbox_rows.write(outbox_rows.stop_rows(root_id, cleared, at), in_commit=False)
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
    _log_stopped_calls(stopped, at, abort)
    _log_stopped_turns(saved, ended, stopped, at, outcome)
    top = saved.get(tree[0].session_id, tree[0])
    if top.parent_session_id is not None and top.session_id in ended:
        await _report_stopped_child(ctx, top)
    return top


def _stop_error(abort: bool, reason: str | None) -> dict[str, str] | None:
    """The ``error`` a stop records on each session it ends: none for an interrupt; for an
    abort, ``framework_cancelled`` with the reason given (or a default message)."""
    if not abort:
        return None
    return {"code": "framework_cancelled", "message": reason or "The session was aborted"}


def _record_stop(
    states: dict[str, SessionState],
    root_id: str,
    ids: list[str],
    at: int,
    error: dict[str, str] | None,
) -> tuple[Stopped, list[str]]:
    """A stop's mutation of a tree's rows (``ids``, parents first, and its root's): each
    active session loses its pending calls (tombstoned on the root), its stashed message, its
    hibernation and its persistent mark, and ends ``failed`` with ``error`` (an abort) or
    ``interrupted``. Returns the calls cleared and the sessions ended; raises ``NoChange``
    when no session of the tree is active any more.

    Pure on ``states``: a retried transaction runs it again on rows read again."""
    root = states[root_id]
    stopped: Stopped = []
    live = [states[sid] for sid in ids if states[sid].status in ACTIVE_STATUSES]
    if not live:
        raise NoChange((stopped, []))
    for s in live:
        stopped.extend((s, entry) for entry in stop_pending(s, root, at))
        s.metadata.pop(STASH_KEY, None)
        s.metadata.pop(HIBERNATED_KEY, None)  # nothing is left to continue
        # A persistent session's workflow is cancelled by the stop: the next message starts anew.
        records.release_mark(s.metadata, s.workflow_id)
        s.status = "failed" if error is not None else "interrupted"
        s.error = error
    return stopped, [s.session_id for s in live]


def _stop_usage_rows(stopped: Stopped, at: int) -> list[dict[str, Any]]:
    """The usage rows of the calls a stop cleared: a ``client_tool_abort`` count and the
    wait each call had until ``at``, two rows a call."""
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
    return rows


def _log_stopped_calls(stopped: Stopped, at: int, abort: bool) -> None:
    """Log each call a stop cleared, and count the waiting ones' outcome as ``stopped``."""
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


def _log_stopped_turns(
    saved: dict[str, SessionState], ended: list[str], stopped: Stopped, at: int, outcome: str
) -> None:
    """Log the summary line of each turn a stop ended, and count its outcome."""
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
        await _control(ctx, workflow_id, run_id, tool_call_id, "stop")


async def _control(
    ctx: RuntimeContext,
    workflow_id: str,
    run_id: str,
    tool_call_id: str,
    kind: Literal["stop", "abandon"],
) -> None:
    """Send the control message ``kind`` (``stop``, ``abandon``) on one call's topic,
    idempotent per run, call and kind."""
    await send_to_turn(
        ctx,
        workflow_id,
        {"kind": kind},
        names.tool_result_topic(tool_call_id),
        names.control_idempotency_key(run_id, tool_call_id, kind),
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
    if _awaits_sub_agents(await tree_of(ctx, root.session_id)):
        raise AgentNotResumableError(
            "The session also awaits sub-agents; a new message cannot be delivered now",
            sessionId=root.session_id,
        )
    run_id = root.run_id or ""
    awaited = _still_awaited(root, run_id, now_ms())
    if awaited and not abandon:
        raise AgentNotResumableError(
            f"The batch is partial: still awaiting {', '.join(awaited)}",
            sessionId=root.session_id,
            awaitedToolCallIds=awaited,
            retryable=True,
        )

    def stash(states: dict[str, SessionState]) -> list[str]:
        return _stash_on(states[root.session_id], run_id, message, abandon)

    saved, to_wake = await ctx.store.update([root.session_id], stash)
    if to_wake is None:
        raise AgentAlreadyRunningError(
            "The turn is already continuing; send the message when it ends",
            sessionId=root.session_id,
        )
    if abandon:
        await _continue_abandoned(ctx, saved[root.session_id], root.workflow_id, run_id, to_wake)
    return names.next_run_id(run_id)


def _awaits_sub_agents(tree: list[SessionState]) -> bool:
    """Whether a sub-agent of the tree (below its top) has calls pending or a turn running:
    a new message for the top would land in the middle of their wait."""
    below = tree[1:]
    return any(s.pending for s in below) or any(s.status in ACTIVE_STATUSES for s in below)


def _still_awaited(root: SessionState, run_id: str, at: int) -> list[str]:
    """The calls of ``run_id``'s batch that still await an answer at ``at``: unanswered, and
    their deadline not lapsed (a lapsed call's result is its expiry)."""
    batch = batch_of(root.pending, run_id)
    return [p.tool_call_id for p in unanswered(batch) if not p.lapsed_by(at)]


def _stash_on(s: SessionState, run_id: str, message: str, abandon: bool) -> list[str]:
    """Stash ``message`` on the session's row for the turn parked on ``run_id``'s batch, and
    return the calls of the batch to wake. Raises ``NoChange(None)`` when that turn is no
    longer parked on the batch, or a message is stashed already: the batch is being drained.

    Pure on ``s``: a retried transaction runs it again on the row read again."""
    if s.status != "suspended_client_tool" or not batch_of(s.pending, run_id) or s.run_id != run_id:
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


async def _continue_abandoned(
    ctx: RuntimeContext,
    stashed_on: SessionState,
    workflow_id: str | None,
    run_id: str,
    to_wake: list[str],
) -> None:
    """Make the turn take up the message that abandoned its batch now: a hibernated turn's
    continuation is started, a parked turn is woken on each call of the batch. (A message
    that drains the batch first waits in the row for the batch's last answer or deadline.)"""
    if mark_of(stashed_on) is not None:
        # A hibernated turn: no workflow to wake.
        await start_continuation(ctx, stashed_on)
        return
    if not workflow_id:
        return
    for tcid in to_wake:
        await _control(ctx, workflow_id, run_id, tcid, "abandon")


rooms.stop_tree = stop_tree
