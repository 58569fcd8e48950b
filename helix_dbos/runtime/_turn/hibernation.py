"""Hibernation: a turn parked past its hot window ends its workflow and keeps nothing live.

A turn parked on a batch (client calls, approvals) waits as a live DBOS workflow for its hot
window (``define_agent(hibernate_after=...)``, else ``HelixSettings.hibernate_after_seconds``).
When the window ends with the batch still incomplete, the hibernate commit records the turn's
state (the step, its plan without inputs, the results known before the park, the running
totals) under the batch's checkpoint slot, marks the session's row (``HIBERNATED_KEY``, with
when the batch falls due), and the workflow returns ``outcome: "hibernated"``. The session
stays ``suspended_client_tool`` with its pending calls, deadlines, ownership and stash.

From then on the row alone says how the turn goes on: a submit that completes the batch, a new
message that abandons it, or the deadline keeper once the batch is due starts the
continuation workflow (``_hibernated/continuation.py``), whose id is derived from the row, so that however
many of them start it, it runs once.

The commit is exactly-once under its slot, and what it decided is recorded: a replay of the
parked workflow takes the same branch. It decides on the locked row, against every submit: an
answer that landed first is seen (and a batch it completed is drained live, not hibernated);
an answer that comes after sees the mark and starts the continuation instead of waking a
workflow that has ended.

A sub-agent's turn hibernates like a root's. Its parent, which was waiting on the sub-agent's
workflow, then hibernates at once too (``hibernate(..., child=call)``, under its own slot): its
mark says which call's sub-agent it waits on, and no answer or deadline makes it due. When the
sub-agent's turn ends (its last continuation, or a stop), ``child_ended`` writes the outcome on
the parent's row, as a submit writes an answer, and makes the parent due; the parent's
continuation (``names.continuation_workflow_id(..., child=call)``) takes the outcome as the
call's result and goes on with the rest of its step. Both commits swap on the parent's row, so
whichever comes second sees the first: a sub-agent that ended before its parent hibernated is
taken at once, live.
"""

from __future__ import annotations

import math
from typing import Any

from ...core.agents import Agent
from ...core.session import PendingCall, SessionState, batch_of
from ...observability.log import log_event
from ...store import Fenced, NoChange, guard, now_ms
from .. import names
from .._commits.once import CommitContext, Policy, commit_once, recorded
from .._commits.opening import ACTIVE_STATUSES
from .._context import current
from .._triage import SUSPENDING_KINDS
from ..records import (
    CHILD_ENDS_KEY,
    FENCED_KEY,
    HIBERNATED_KEY,
    NEVER_DUE,
    STASH_KEY,
    FencedResult,
    HibernationMark,
    HibernationRecord,
    PlanItem,
    ToolResult,
    TurnOutcome,
    TurnSummary,
)

__all__ = [
    "batch_settled",
    "child_ended",
    "continuation_id",
    "due_at",
    "hibernate",
    "hot_window",
    "mark_of",
    "on_answer",
    "waits_on_child",
]


def hot_window(agent: Agent) -> float | None:
    """Seconds a turn of ``agent`` parks live before it hibernates; ``None``: never."""
    window = agent.hibernate_after
    if window is None:
        window = current().settings.hibernate_after_seconds
    if window is None or math.isinf(window):
        return None
    return window


def mark_of(state: SessionState) -> HibernationMark | None:
    """The session's hibernation mark, if its turn is hibernated."""
    mark = state.metadata.get(HIBERNATED_KEY)
    return mark if isinstance(mark, dict) else None  # type: ignore[return-value]


def waits_on_child(mark: HibernationMark | None) -> bool:
    """Whether a hibernated turn still waits on its sub-agent (not on answers or deadlines).

    Its due time says so: ``NEVER_DUE`` until the sub-agent's end is reported
    (``child_ended`` makes it ``0``), and never again after, whatever moves it next (a
    keeper's claim moves it to the end of its lease)."""
    return mark is not None and mark.get("child") is not None and mark["dueAt"] == NEVER_DUE


def continuation_id(state: SessionState) -> str | None:
    """The workflow id of the continuation of ``state``'s hibernated turn, if hibernated."""
    mark = mark_of(state)
    if mark is None or state.run_id is None:
        return None
    return names.continuation_workflow_id(state.session_id, state.run_id, mark.get("child"))


def batch_settled(batch: list[PendingCall], at: int) -> bool:
    """Whether nothing of the batch waits any more at ``at``: every call answered or lapsed."""
    return all(p.submitted_at is not None or p.lapsed_by(at) for p in batch)


def due_at(batch: list[PendingCall]) -> int:
    """When a hibernated batch falls due with no answer: its last unanswered deadline (the
    live park, too, waits for every call). ``0`` when nothing waits."""
    return max((p.deadline_at for p in batch if p.submitted_at is None), default=0)


def on_answer(owner: SessionState, run_id: str, ready: bool) -> bool:
    """Update a hibernated owner's mark for an answer just stored on ``run_id``'s batch (in
    the submit's mutation): due now if the batch is ready, else at its last unanswered
    deadline. ``True`` if the owner is hibernated (the answer wakes no workflow)."""
    mark = mark_of(owner)
    if mark is None:
        return False
    # A turn hibernated on its sub-agent goes on when the sub-agent ends, whatever its own
    # calls: only that end moves its due time (an answer after it would delay a due turn).
    if mark.get("child") is None:
        mark["dueAt"] = 0 if ready else due_at(batch_of(owner.pending, run_id))
    return True


#: The hibernate commit reads no slot first: a second execution cannot land (the checkpoint's
#: key refuses it, and the recorded result is read then).
_HIBERNATE_POLICY = Policy(read_first=False)


async def hibernate(
    session_id: str,
    run_id: str,
    workflow_id: str,
    step: int,
    plan: list[PlanItem],
    results: dict[str, ToolResult],
    summary: TurnSummary,
    child: str | None = None,
) -> HibernationRecord | FencedResult:
    """The hibernate commit of ``run_id``'s batch (exactly once, under its slot of
    ``workflow_id``): hibernate, or ``{"hibernated": False}`` when nothing waits any more
    (every call answered or lapsed, or a new message abandons the batch) and the turn drains
    the batch live. Fenced like every commit of the turn (a stop or a supersede).

    ``child``: the turn waits on the sub-agent this call started, which hibernated (under
    ``names.child_wait_slot``): hibernate until it ends, or, if its end is on the row already,
    ``{"hibernated": False, "childOutcome": ...}``."""
    slot = names.hibernate_slot(workflow_id, run_id, step, child)
    record = _record_of(step, plan, results, summary, child)

    async def body() -> HibernationRecord:
        at = now_ms()

        def swap(states: dict[str, SessionState]) -> HibernationRecord:
            owner = states[session_id]
            guard(owner, run_id, ACTIVE_STATUSES)
            if child is not None:
                return _await_child(owner, child)
            batch = batch_of(owner.pending, run_id)
            stash = owner.metadata.get(STASH_KEY)
            abandon = isinstance(stash, dict) and bool(stash.get("abandonPending"))
            if abandon or batch_settled(batch, at):
                raise NoChange({"hibernated": False})
            mark: HibernationMark = {
                "at": at,
                "workflowId": workflow_id,
                "step": step,
                "dueAt": due_at(batch),
            }
            owner.metadata[HIBERNATED_KEY] = mark
            return record

        def _await_child(owner: SessionState, call: str) -> HibernationRecord:
            ended = owner.metadata.get(CHILD_ENDS_KEY, {}).get(call)
            if ended is not None:
                raise NoChange({"hibernated": False, "childOutcome": ended})
            owner.metadata[HIBERNATED_KEY] = {
                "at": at,
                "workflowId": workflow_id,
                "step": step,
                "dueAt": NEVER_DUE,
                "child": call,
            }
            return record

        _, decided = await current().store.update([session_id], swap)
        return decided

    # The row read apart and one statement (a swap from it), as a submit: no slot read first,
    # as a second execution cannot land (the checkpoint's key refuses it, then reads it).
    row = await current().store.load(session_id)
    try:
        decided = await commit_once(
            CommitContext(slot, read=[row] if row else []),
            session_id,
            run_id,
            body,
            policy=_HIBERNATE_POLICY,
        )
    except Fenced as fenced:
        if await recorded(names.turn_slot(workflow_id, run_id, step, "results")) is not None:
            # The submit that completed the batch committed its results already (early, as
            # the window ended): the turn takes them, as if woken.
            return {"hibernated": False}
        return {FENCED_KEY: fenced.reason}
    if decided.get("hibernated"):
        log_event("turn.hibernated", sessionId=session_id, runId=run_id, step=step)
    return decided


def _record_of(
    step: int,
    plan: list[PlanItem],
    results: dict[str, ToolResult],
    summary: TurnSummary,
    child: str | None,
) -> HibernationRecord:
    """What the hibernate commit records: where the turn continues from."""
    record: HibernationRecord = {
        "hibernated": True,
        "step": step,
        "plan": [_without_input(item, results) for item in plan],
        "results": results,
        "summary": summary,
    }
    if child is not None:
        record["child"] = child
    return record


def _without_input(item: PlanItem, results: dict[str, ToolResult]) -> PlanItem:
    """A plan item without its call's input where nothing reads it again: the pending entry
    holds a suspended call's, and a call with a result ran. (A call after a sub-agent that
    hibernated has not run yet: it keeps its input.)"""
    if item["kind"] not in SUSPENDING_KINDS and item["toolCallId"] not in results:
        return item
    kept: dict[str, Any] = {k: v for k, v in item.items() if k != "input"}
    return kept  # type: ignore[return-value]


async def child_ended(child: SessionState, outcome: TurnOutcome) -> SessionState | None:
    """Report the end of the sub-agent ``child`` to its parent's row (the outcome, under
    ``CHILD_ENDS_KEY``, by the call that started it), and make the parent due if it
    hibernated waiting on it. Written whether or not the parent hibernated yet: its hibernate commit, which swaps
    on the same row, then sees the end and goes on live. Returns the parent's row if it is
    due now (the caller starts its continuation), else ``None``."""
    assert child.parent_session_id is not None
    parent_session_id = child.parent_session_id
    tool_call_id = names.child_call_id(child.session_id, parent_session_id)

    def report(states: dict[str, SessionState]) -> bool:
        parent = states[parent_session_id]
        ends = parent.metadata.setdefault(CHILD_ENDS_KEY, {})
        if tool_call_id in ends:
            raise NoChange(False)  # reported already (a replay, a stop then a continuation)
        ends[tool_call_id] = outcome
        mark = mark_of(parent)
        if mark is None or mark.get("child") != tool_call_id:
            return False
        mark["dueAt"] = 0
        return True

    saved, due = await current().store.update([parent_session_id], report)
    return saved[parent_session_id] if due else None
