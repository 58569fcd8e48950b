"""The reconciler: sessions whose status and workflow disagree are repaired, each once.

A session's status says whether a turn is active; its turn's DBOS workflow says whether one
runs. The two are written by different transactions, so a crash (or an operator's hand) can
leave them apart. ``heal`` finds each such session and resolves it exactly once:

============================  ===================  ==========================================
session                       workflow             repair (``action``)
============================  ===================  ==========================================
active (claimed)              missing              start it under its recorded id
                                                   (``started``); without the agent here (the
                                                   CLI), end it ``failed`` (``ended_lost``)
active                        CANCELLED            end it ``interrupted`` (``ended_cancelled``)
active                        ended (SUCCESS,      end it ``failed``, code
                              ERROR, ...)          ``framework_turn_lost`` (``ended_lost``)
active, batch ready           PENDING              send the answers' wake-ups again
                                                   (``rewoken``; DBOS drops duplicates)
ended                         PENDING              cancel it and wake its parked calls
                                                   (``cancelled``)
ended, marks the workflow     PENDING              none: a persistent session between turns,
as its live one                                    its workflow waiting on its inbox
============================  ===================  ==========================================

A persistent session's workflow (``_companions/persistent.py``) is started, ended and cancelled by the
same rules; ending its session removes the mark, so the next message starts a new workflow.

Only sessions untouched for ``grace_seconds`` are looked at (a start in flight is not a lost
one). Every repair that changes a session is a compare-and-swap on the version it was judged
on, so two reconcilers (two processes, or the CLI beside a server) never repair one session
twice; each repair is logged as ``session.healed`` and written as a ``session_healed`` event.
Ending a session clears its pending calls and ownership entries with ``stopped`` tombstones.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dbos import DBOS, SetWorkflowID

from ...core.events import event
from ...core.session import SessionState, batch_of, is_batch_ready_at_last_submit, stop_pending
from ...observability import approval_metrics
from ...observability.log import log_event
from ...store import NoChange, now_ms, patience, touched_hibernated
from .. import names, records
from .._commits.opening import ACTIVE_STATUSES
from .._companions.persistent import start_persistent
from .._context import RuntimeContext
from .._hibernated.continuation import start_continuation
from .._submit.answer import wake_answered
from .._turn.hibernation import continuation_id, mark_of, waits_on_child
from .._turn.workflow import run_turn
from ..records import STASH_KEY, RepairRecord
from .control import wake_stopped

__all__ = ["Repair", "heal", "heal_forever"]

_ENDED_WORKFLOW = frozenset({"SUCCESS", "ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"})
_PAGE = 500
HIBERNATED_LOOKBACK_SECONDS = 600.0
"""How far back a pass looks for hibernated turns written since they hibernated (the passes
run every few seconds: ten minutes is many passes)."""
"""Running workflows read per query by a pass (and sessions per lookup)."""


@dataclass(frozen=True)
class Repair:
    """One repair the reconciler made."""

    session_id: str
    workflow_id: str | None
    workflow_status: str | None
    """DBOS's status of the workflow (``None``: no such workflow)."""
    action: str
    """``started``, ``ended_cancelled``, ``ended_lost``, ``rewoken``, ``cancelled`` or
    ``continued`` (a hibernated turn whose complete batch was not due)."""

    def dump(self) -> RepairRecord:
        """The JSON form (camelCase)."""
        d = asdict(self)
        return {
            "sessionId": d["session_id"],
            "workflowId": d["workflow_id"],
            "workflowStatus": d["workflow_status"],
            "action": d["action"],
        }


async def heal(
    ctx: RuntimeContext, *, grace_seconds: float = 15.0, can_start: bool = True
) -> list[Repair]:
    """One reconciliation pass; returns the repairs it made.

    ``can_start``: whether this process may start turn workflows (a launched runtime with the
    session's agent registered); the CLI passes ``False``.
    """
    cutoff = datetime.now(UTC) - timedelta(seconds=grace_seconds)
    repairs: list[Repair] = []
    active = await ctx.store.settled_before(cutoff, active=True)
    found = await _workflow_statuses(ctx, [s.workflow_id for s in active if s.workflow_id])
    for state in active:
        status = found.get(state.workflow_id or "")
        repair = await _heal_active(ctx, state, status, can_start, grace_seconds)
        if repair is not None:
            repairs.append(repair)
    # Hibernated turns written lately (an answer, say): one whose batch is complete but was
    # not made due is continued. Older ones were judged by the passes that followed them.
    since = cutoff - timedelta(seconds=HIBERNATED_LOOKBACK_SECONDS)
    for state in await touched_hibernated(ctx.store, since, cutoff):
        repair = await _heal_hibernated(ctx, state, can_start)
        if repair is not None:
            repairs.append(repair)
    # Every running turn is PENDING (thousands may be parked): read them a page at a time, so
    # that a pass holds one page, not all of them, at once. The orphans it cancels leave the
    # list (the next page starts that much earlier); a workflow that ends on its own meanwhile
    # shifts the pages too, and what a pass misses, the next one sees.
    offset = 0
    while True:
        page = await ctx.dbos().list_workflows_async(
            status="PENDING",
            name=[names.TURN_WORKFLOW, names.CONTINUE_WORKFLOW, names.PERSISTENT_WORKFLOW],
            load_input=False,
            load_output=False,
            limit=_PAGE,
            offset=offset,
        )
        ids = [w.workflow_id for w in page]
        del page
        cancelled = 0
        if ids:
            for state in await ctx.store.settled_before(cutoff, active=False, workflow_ids=ids):
                if records.marks(state.metadata, state.workflow_id):
                    continue  # a persistent session between turns: its workflow waits, healthy
                repairs.append(await _cancel_orphan(ctx, state))
                cancelled += 1
        if len(ids) < _PAGE:
            return repairs
        offset += _PAGE - cancelled


async def heal_forever(
    ctx: RuntimeContext, interval_seconds: float, grace_seconds: float, stopping: asyncio.Event
) -> None:
    """Run ``heal`` every ``interval_seconds`` until ``stopping`` is set (the runtime's
    background task; a pass in progress finishes its transactions first).

    A pass that fails (the database is down) is logged and the next one tries again.
    """
    while not stopping.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=interval_seconds)
            return
        try:
            with patience(None):
                await heal(ctx, grace_seconds=grace_seconds, can_start=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log_event("session.heal_failed", error=type(exc).__name__)


async def _workflow_statuses(ctx: RuntimeContext, workflow_ids: list[str]) -> dict[str, str]:
    if not workflow_ids:
        return {}
    found = await ctx.dbos().list_workflows_async(
        workflow_ids=workflow_ids, load_input=False, load_output=False
    )
    return {w.workflow_id: w.status for w in found}


async def _heal_active(
    ctx: RuntimeContext,
    state: SessionState,
    status: str | None,
    can_start: bool,
    grace_seconds: float,
) -> Repair | None:
    if mark_of(state) is not None:
        return None  # hibernated since it was read: it has no workflow to judge
    if status in ("PENDING", "ENQUEUED"):
        return await _rewake(ctx, state, status, grace_seconds)
    if status is None:
        if not state.is_root:
            parent = await ctx.store.load(state.parent_session_id or "")
            if parent is not None and parent.status in ACTIVE_STATUSES:
                return None  # the parent's turn starts (or recovers) its child's workflow
        startable = (
            can_start
            and state.agent_type in ctx.registry
            and state.is_root
            and state.run_id is not None
            and state.workflow_id
            in (
                names.turn_workflow_id(state.session_id, state.run_id),
                names.persistent_workflow_id(state.session_id, state.run_id),
            )
        )
        if startable:
            return await _start(ctx, state)
        return await _end(ctx, state, status, "failed", "ended_lost")
    if status == "CANCELLED":
        return await _end(ctx, state, status, "interrupted", "ended_cancelled")
    if status in _ENDED_WORKFLOW:
        return await _end(ctx, state, status, "failed", "ended_lost")
    return None


async def _heal_hibernated(
    ctx: RuntimeContext, state: SessionState, can_start: bool
) -> Repair | None:
    """A hibernated turn has no workflow, and the deadline keeper continues it when due. One
    whose batch is complete yet not due (its last answer was taken by a release that did not
    know hibernation) is continued here."""
    batch = batch_of(state.pending, state.run_id or "")
    if not (can_start and batch and is_batch_ready_at_last_submit(batch)):
        return None
    if waits_on_child(mark_of(state)):
        return None  # it goes on when its sub-agent ends, not on its answers
    continuation = continuation_id(state) or ""
    if await _workflow_statuses(ctx, [continuation]):
        return None  # started already: it removes the mark at its results commit
    if await start_continuation(ctx, state) is None:
        return None
    return Repair(state.session_id, state.workflow_id, "SUCCESS", "continued")


async def _claim(
    ctx: RuntimeContext, seen: SessionState, action: str, status: str | None, change: Any = None
) -> bool:
    """Record the repair on the session, if it is still as it was judged; ``True`` if won."""
    root_id = seen.root_session_id
    at = now_ms()

    def mutate(states: dict[str, SessionState]) -> bool:
        s = states[seen.session_id]
        if s.version != seen.version:
            raise NoChange(False)  # changed since (its turn moved on, or another healer won)
        if change is not None:
            change(s, states[root_id], at)
        s.metadata["heal"] = {"action": action, "at": at, "workflowStatus": status}
        return True

    async def commit() -> bool:
        _, won = await ctx.store.update(list(dict.fromkeys([seen.session_id, root_id])), mutate)
        if won:
            await ctx.store.append_events(
                seen.session_id,
                seen.run_id,
                [event("session_healed", action=action, workflowStatus=status)],
            )
        return bool(won)

    won = await ctx.store.transact(commit)
    if won:
        log_event(
            "session.healed",
            sessionId=seen.session_id,
            runId=seen.run_id,
            workflowId=seen.workflow_id,
            workflowStatus=status,
            action=action,
        )
    return won


async def _start(ctx: RuntimeContext, state: SessionState) -> Repair | None:
    if not await _claim(ctx, state, "started", None):
        return None
    assert state.run_id is not None and state.workflow_id is not None
    if state.workflow_id == names.persistent_workflow_id(state.session_id, state.run_id):
        await start_persistent(state, state.run_id, state.workflow_id)
        return Repair(state.session_id, state.workflow_id, None, "started")
    # The id is the claim's: if a workflow started meanwhile, DBOS returns that one.
    with SetWorkflowID(state.workflow_id):
        await DBOS.start_workflow_async(
            run_turn,
            state.session_id,
            state.run_id,
            state.agent_type,
            state.root_session_id,
            layout=names.TURN_LAYOUT,
        )
    return Repair(state.session_id, state.workflow_id, None, "started")


async def _end(
    ctx: RuntimeContext, state: SessionState, status: str | None, outcome: str, action: str
) -> Repair | None:
    error = (
        None
        if outcome == "interrupted"
        else {
            "code": "framework_turn_lost",
            "message": "The turn's workflow was lost; the session was ended.",
            "retryable": True,
        }
    )

    def end(s: SessionState, root: SessionState, at: int) -> None:
        stop_pending(s, root, at)
        s.metadata.pop(STASH_KEY, None)
        records.release_mark(s.metadata, s.workflow_id)  # its workflow is gone
        s.status = outcome  # type: ignore[assignment]
        s.error = error

    if not await _claim(ctx, state, action, status, end):
        return None
    await ctx.store.append_events(
        state.session_id,
        state.run_id,
        [event("turn_end", outcome=outcome, **({"error": error} if error else {}))],
    )
    approval_metrics.record_turn(outcome)
    return Repair(state.session_id, state.workflow_id, status, action)


async def _rewake(
    ctx: RuntimeContext, state: SessionState, status: str, grace_seconds: float
) -> Repair | None:
    """A parked turn whose batch is ready but that still waits: its wake-up was lost."""
    batch = batch_of(state.pending, state.run_id or "")
    if not batch or not is_batch_ready_at_last_submit(batch):
        return None
    last = max(p.submitted_at or 0 for p in batch)
    if now_ms() - last < grace_seconds * 1000:
        return None
    for entry in batch:
        if entry.submitted_at is not None:
            await wake_answered(ctx, state, entry)
    log_event(
        "session.healed",
        sessionId=state.session_id,
        runId=state.run_id,
        workflowId=state.workflow_id,
        workflowStatus=status,
        action="rewoken",
    )
    return Repair(state.session_id, state.workflow_id, status, "rewoken")


async def _cancel_orphan(ctx: RuntimeContext, state: SessionState) -> Repair:
    """An ended session's workflow still runs (a stop crashed before it cancelled it)."""
    assert state.workflow_id is not None
    await ctx.dbos().cancel_workflow_async(state.workflow_id)
    root = state if state.is_root else await ctx.store.load(state.root_session_id)
    if root is not None:
        for tcid, tomb in root.completed.items():
            if tomb.owner_session_id == state.session_id and tomb.outcome == "stopped":
                await wake_stopped(ctx, state.workflow_id, tomb.run_id, tcid)
    log_event(
        "session.healed",
        sessionId=state.session_id,
        runId=state.run_id,
        workflowId=state.workflow_id,
        workflowStatus="PENDING",
        action="cancelled",
    )
    return Repair(state.session_id, state.workflow_id, "PENDING", "cancelled")
