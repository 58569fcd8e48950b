"""Submitting a client tool's result (or an approval decision) to a parked turn.

The order is the seed's: check the size before anything is read; route through the root's
ownership map to the owning session; fence on the call's run; validate against the tool's
schema; store the answer durably on the pending entry (compare-and-swap); wake the owner's
workflow with a DBOS message keyed by the run and the call. Everything after the size check
decides on the root's row as read once, and stores the answer, the row's compare-and-swap and
the wake-up message (``wake.send_in_transaction``) in one statement; a row changed since the
read fails the swap and the transaction runs again on the locked rows (``submit``). The
answer says what the stored result caused (its continuation).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from ...core.approval_policy import IN_PROCESS, Tally, check_decider, counted_event, tally
from ...core.session import (
    Continuation,
    PendingCall,
    SessionState,
    SubmitAnswer,
    batch_of,
    is_batch_ready_at_last_submit,
)
from ...errors import ErrorCode, HelixError, RunSupersededError, SessionNotFoundError
from ...observability import approval_metrics
from ...observability.log import log_event
from ...store import NoChange, RetryTransaction, decisions_answer_row, decisions_queue, now_ms
from .. import names
from .._commits.opening import ACTIVE_STATUSES
from .._context import RuntimeContext
from .._hibernated.continuation import start_continuation
from .._notifications import outbox_rows
from .._turn.batch_job import continue_batch
from .._turn.hibernation import mark_of, on_answer
from .._turn.wake import SendNotEnlisted, send_in_transaction, send_to_turn, wake_local
from ..records import TurnMessage
from .checks import (
    MISSING,
    Submission,
    check_shape,
    log_decision,
    measure_result_bytes,
    validated_response,
)

__all__ = [
    "MISSING",
    "Submission",
    "measure_result_bytes",
    "precheck",
    "submit",
    "wake_answered",
]


def _unknown(tool_call_id: str, reason: str | None = None) -> SubmitAnswer:
    return SubmitAnswer(status="unknown_tool_call", reason=reason, tool_call_id=tool_call_id)


def _continuation(owner: SessionState, run_id: str) -> Continuation:
    batch = batch_of(owner.pending, run_id)
    if not batch:
        return Continuation(kind="consumed")
    if is_batch_ready_at_last_submit(batch):
        return Continuation(kind="new_run", run_id=names.next_run_id(run_id))
    return Continuation(kind="awaiting_batch")


async def precheck(ctx: RuntimeContext, sub: Submission) -> None:
    """Raise the refusal ``submit`` would give ``sub`` before storing it, and store nothing.

    A host that stores several answers of one request checks them all first, so one refused
    answer refuses the whole request (the seed's rule). Answers ``submit`` would not store
    (an unknown or answered call) pass: ``submit`` answers them without a write. A refusal is
    counted like ``submit`` counts its own.
    """
    try:
        await _precheck(ctx, sub)
    except HelixError as exc:
        approval_metrics.record_refusal(exc)
        raise


async def _precheck(ctx: RuntimeContext, sub: Submission) -> None:
    check_shape(sub, ctx)
    root = await ctx.store.load(sub.session_id)
    owner_id = root.ownership.get(sub.tool_call_id) if root is not None else None
    if root is None or owner_id is None:
        return
    owner = root if owner_id == root.session_id else await ctx.store.load(owner_id)
    entry = owner.pending.get(sub.tool_call_id) if owner is not None else None
    if owner is None or entry is None or entry.submitted_at is not None:
        return
    known = sub.needs_tool or owner.agent_type in ctx.registry
    tool = ctx.registry.get(owner.agent_type).tool(entry.tool_name) if known else None
    validated_response(
        sub, entry, ctx, tool.input_model if tool else None, tool.output_model if tool else None
    )
    if entry.kind == "approval":  # the policy's refusals, before any answer is stored
        check_decider(entry, owner.principal, sub.decider or IN_PROCESS, now_ms())


@dataclass(frozen=True, slots=True)
class _Verdict:
    """What one submit's transaction decided (logged and answered after it committed)."""

    outcome: Literal["accepted", "counted", "repeat", "duplicate", "unknown", "tombstone", "lapsed"]
    """``counted``: an approval stored towards its quorum (the call still waits); ``repeat``:
    that approver's approval of those arguments was counted already (nothing written)."""
    owner: SessionState | None = None
    entry: PendingCall | None = None
    reason: str | None = None
    """``unknown``: why (the log's reason); ``tombstone``: the tombstone's outcome."""
    at: int = 0
    run_id: str | None = None
    sent: str = "skipped"
    """How the answer's wake-up went: ``sent`` (in the transaction), ``skipped`` (no
    workflow), ``hibernated`` (the turn has none: its continuation starts), ``unavailable``
    or ``failed`` (sent after the commit)."""
    tally: Tally | None = None
    """An approval's: what the answer did under its policy, and the answer as validated."""
    decision: dict[str, Any] | None = None


def _route(sub: Submission, root: SessionState) -> _Verdict | str:
    """The owner of the call by the root's ownership map (its id), or the verdict without
    one: a tombstone's, or unknown."""
    tcid = sub.tool_call_id
    tombstone = root.completed.get(tcid)
    if tombstone is not None:
        return _Verdict(
            "tombstone",
            root,
            reason=tombstone.outcome,
            at=tombstone.completed_at,
            run_id=tombstone.run_id,
        )
    owner_id = root.ownership.get(tcid)
    if owner_id is None:
        reason = "ownership_missing_toolcall" if root.ownership else "ownership_map_absent"
        return _Verdict("unknown", reason=reason)
    return owner_id


def _store_answer(sub: Submission, ctx: RuntimeContext, owner: SessionState) -> _Verdict:
    """Store the answer on the owner's pending entry (in place), or the verdict without it.

    Pure (it may run again on a retried transaction). The stop of the call's run is read here,
    in the transaction that would store the answer: a stop clears the entry (and moves the
    session out of its active statuses) first, so nothing is stored after it.

    Raises:
        RunSupersededError, InvalidResultError, ApprovalMismatchError, RequestValidationError:
            the answer is refused; nothing is written.
    """
    tcid = sub.tool_call_id
    entry = owner.pending.get(tcid)
    if entry is None or owner.status not in ACTIVE_STATUSES:
        return _Verdict("unknown", reason="ownership_missing_toolcall")
    if entry.submitted_at is not None:
        return _Verdict("duplicate", owner, entry)
    if owner.run_id is not None and owner.run_id != entry.run_id:
        raise RunSupersededError(
            "The call's run was superseded by another entry; nothing was written",
            toolCallId=tcid,
            runId=entry.run_id,
        )
    # An error or a plain decision needs no agent definition (the CLI's fail-call, approve).
    known = sub.needs_tool or owner.agent_type in ctx.registry
    tool = ctx.registry.get(owner.agent_type).tool(entry.tool_name) if known else None
    response = validated_response(
        sub, entry, ctx, tool.input_model if tool else None, tool.output_model if tool else None
    )
    at = now_ms()
    if entry.lapsed_by(at):
        return _Verdict("lapsed", owner, entry, at=at)
    if entry.kind == "approval":
        # Who decides, checked against the call's policy; counted towards its quorum.
        who = sub.decider or IN_PROCESS
        check_decider(entry, owner.principal, who, at)
        counted = tally(entry, response, who, at)
        outcome = "accepted" if counted.effect == "decided" else counted.effect
        return _Verdict(outcome, owner, entry, at=at, tally=counted, decision=response)
    entry.submitted_at = at
    entry.response = response
    return _Verdict("accepted", owner, entry, at=at)


async def submit(ctx: RuntimeContext, sub: Submission) -> SubmitAnswer:
    """Store one answer and wake the owning turn (``_submit``); count its answer.

    The live metrics count every submit by its call's tool and what it answered: the
    continuation of an accepted answer, ``already_completed``, ``unknown_tool_call`` (or its
    reason), or the code of the refusal it raised.
    """
    try:
        answer, tool = await _submit(ctx, sub)
    except HelixError as exc:
        approval_metrics.record_refusal(exc)
        raise
    approval_metrics.record_answer(tool, answer)
    return answer


async def _submit(ctx: RuntimeContext, sub: Submission) -> tuple[SubmitAnswer, str]:
    """Store one answer and wake the owning turn; see the module docstring for the order.

    Returns the answer and the call's tool (empty when the call was not found).
    """
    check_shape(sub, ctx)
    verdict = await ctx.store.transact(_StoreAndWake(ctx, sub))
    if verdict.tally is not None and verdict.outcome in ("accepted", "counted"):
        assert verdict.entry is not None
        log_decision(sub, verdict.entry, verdict.tally, verdict.decision or {})
    if verdict.outcome == "accepted":
        return await _accepted(ctx, sub, verdict)
    if verdict.outcome in ("counted", "repeat"):
        assert verdict.entry is not None
        waiting = Continuation(kind="awaiting_quorum")
        answer = SubmitAnswer(
            status="accepted", continuation=waiting, tool_call_id=sub.tool_call_id
        )
        return answer, verdict.entry.tool_name
    if verdict.outcome == "duplicate":
        assert verdict.owner is not None and verdict.entry is not None
        return await _duplicate(ctx, verdict.owner, verdict.entry), verdict.entry.tool_name
    return _not_accepted(sub, verdict)


class _StoreAndWake:
    """The submit's transaction: route the call by the root's row, store the answer on the
    owner's entry by compare-and-swap, and enlist its wake-up message with it.

    The root's row is read first, unlocked, and routed from as read: the unit's swap starts
    from it (``SessionStore.read_earlier``), so on the common path a submit is that read and one
    statement, with no transaction around it. A row changed meanwhile (another answer of the
    batch) fails the swap, and the unit runs again, reading the root's row locked. A
    sub-agent's call locks and reads the owner's row next. The answer and its wake-up commit
    together: no window where one exists without the other. The message carries the
    answer's time, so the woken turn knows which answer to wait for
    (``steps.await_visible``).
    """

    __slots__ = ("_ctx", "_enlist", "_sub")

    def __init__(self, ctx: RuntimeContext, sub: Submission) -> None:
        self._ctx = ctx
        self._sub = sub
        self._enlist = ctx.client is not None

    def _decide(self, states: dict[str, SessionState], owner_id: str) -> _Verdict:
        """Store the answer on ``owner_id``'s row (a pure mutation: it may run again)."""
        owner = states[owner_id]
        verdict = _store_answer(self._sub, self._ctx, owner)
        if verdict.outcome == "counted":
            return verdict  # stored; the call waits for the rest of its quorum
        if verdict.outcome != "accepted":
            raise NoChange(verdict)
        assert verdict.entry is not None
        run_id = verdict.entry.run_id
        # A hibernated turn's mark says when its batch falls due: now, once it is complete.
        on_answer(owner, run_id, _continuation(owner, run_id).kind == "new_run")
        return verdict

    def _at_root(self, states: dict[str, SessionState]) -> _Verdict | str:
        routed = _route(self._sub, states[self._sub.session_id])
        if isinstance(routed, _Verdict):
            raise NoChange(routed)
        if routed != self._sub.session_id:
            raise NoChange(routed)  # a sub-agent's call: its row is locked next
        return self._decide(states, routed)

    async def _store(self) -> tuple[dict[str, SessionState], _Verdict]:
        """The rows as saved and the verdict of the answer on its owner's entry."""
        store = self._ctx.store
        root = await store.load(self._sub.session_id)
        if root is None:
            # No session, no call to answer (one created after this read has no call pending).
            return {}, _Verdict("unknown", reason="root_state_not_found")
        store.read_earlier([root])  # the swap starts from it: no second read
        try:
            saved, routed = await store.update([self._sub.session_id], self._at_root)
            if not isinstance(routed, str):
                return saved, routed
            owner_id = routed
            return await store.update([owner_id], lambda states: self._decide(states, owner_id))
        except SessionNotFoundError as missing:
            reason = (
                "root_state_not_found"
                if missing.details.get("sessionId") == self._sub.session_id
                else "ownership_missing_toolcall"
            )
            return {}, _Verdict("unknown", reason=reason)

    async def __call__(self) -> _Verdict:
        saved, verdict = await self._store()
        if verdict.outcome not in ("accepted", "counted"):
            return verdict
        assert verdict.owner is not None and verdict.entry is not None
        owner = saved[verdict.owner.session_id]
        tcid = self._sub.tool_call_id
        if verdict.tally is not None and verdict.decision is not None:
            # Who decided, on record in the answer's transaction (``store/decisions.py``).
            row = decisions_answer_row(
                owner,
                owner.pending[tcid],
                self._sub.decider or IN_PROCESS,
                verdict.tally,
                verdict.decision,
                verdict.at,
            )
            await decisions_queue([row])
        if verdict.outcome == "counted":
            entry = owner.pending[tcid]
            # The stream shows the quorum's progress, committed with the approval it counts.
            await self._ctx.store.append_events(
                owner.session_id, entry.run_id, [counted_event(entry)]
            )
            return replace(verdict, owner=owner, entry=entry)
        # The hooks' ``resolved`` event of this answer commits with it (``_notifications/outbox_rows.py``).
        await outbox_rows.write(
            outbox_rows.answer_rows(owner, owner.pending[tcid], verdict.at), in_commit=False
        )
        sent = await self._wake(owner, verdict)
        return replace(verdict, owner=owner, entry=owner.pending[tcid], sent=sent)

    async def _wake(self, owner: SessionState, verdict: _Verdict) -> str:
        """Enlist the answer's wake-up in the transaction; how it went (``_Verdict.sent``)."""
        if mark_of(owner) is not None:
            return "hibernated"  # no workflow waits: the continuation starts after the commit
        if owner.workflow_id is None:
            return "skipped"
        if not self._enlist:
            return "failed" if self._ctx.client is not None else "unavailable"
        assert verdict.entry is not None
        tcid = self._sub.tool_call_id
        try:
            await send_in_transaction(
                self._ctx,
                owner.workflow_id,
                _answer_message(tcid, verdict.at),
                names.tool_result_topic(tcid),
                names.submit_idempotency_key(verdict.entry.run_id, tcid),
                sessionId=owner.session_id,
                runId=verdict.entry.run_id,
            )
        except SendNotEnlisted:
            # Run the whole transaction again without it; the send follows the commit.
            self._enlist = False
            raise RetryTransaction("the wake-up could not be enlisted", 0.0) from None
        return "sent"


def _not_accepted(sub: Submission, verdict: _Verdict) -> tuple[SubmitAnswer, str]:
    """The answer to a submit that stored nothing and found no stored answer: unknown, a
    tombstone's, or late."""
    tcid = sub.tool_call_id
    if verdict.outcome == "unknown":
        log_event(
            "client_tool.submit_unknown",
            sessionId=sub.session_id,
            toolCallId=tcid,
            code=ErrorCode.UNKNOWN_TOOL_CALL.value,
            reason=verdict.reason,
        )
        return _unknown(tcid), ""
    if verdict.outcome == "tombstone":
        if verdict.reason == "stopped":
            return _unknown(tcid, "run_stopped"), ""
        if verdict.reason == "timeout":
            return _late(sub, verdict.run_id, completedAt=verdict.at, submittedAt=now_ms()), ""
        answered = SubmitAnswer(
            status="already_completed",
            continuation=Continuation(kind="consumed"),
            tool_call_id=tcid,
        )
        return answered, ""
    entry = verdict.entry
    assert entry is not None and verdict.outcome == "lapsed"
    late = _late(
        sub,
        entry.run_id,
        toolName=entry.tool_name,
        deadlineAt=entry.deadline_at,
        submittedAt=verdict.at,
    )
    return late, entry.tool_name


async def _accepted(
    ctx: RuntimeContext, sub: Submission, verdict: _Verdict
) -> tuple[SubmitAnswer, str]:
    """After the answer committed: log it, start what it caused, and say what that is."""
    owner, entry = verdict.owner, verdict.entry
    assert owner is not None and entry is not None
    log_event(
        "client_tool.submitted",
        sessionId=sub.session_id,
        ownerSessionId=owner.session_id,
        runId=entry.run_id,
        toolCallId=sub.tool_call_id,
        toolName=entry.tool_name,
        hasError="error" in (entry.response or {}),
        kind=entry.kind,
    )
    continuation = _continuation(owner, entry.run_id)
    continued_here = False
    if verdict.sent == "hibernated":
        if continuation.kind == "new_run":
            continued_here = await start_continuation(ctx, owner) is not None
    elif verdict.sent == "sent" and owner.workflow_id is not None:
        if continuation.kind == "new_run":
            # The batch is complete: if its turn parked here on client calls, run the batch's
            # job now, while DBOS hands the turn its wake-up (``batch_job``).
            ctx.batch_jobs.start(owner.workflow_id, continue_batch)
        wake_local(owner.workflow_id, names.tool_result_topic(sub.tool_call_id))
    elif verdict.sent in ("unavailable", "failed"):
        # The answer is stored; its wake-up could not ride in the transaction: send it now.
        await wake_answered(ctx, owner, entry)
    accepted = SubmitAnswer(
        status="accepted",
        continuation=continuation,
        tool_call_id=sub.tool_call_id,
        owner_workflow_id=owner.workflow_id,
        continued_here=continued_here,
    )
    return accepted, entry.tool_name


def _late(sub: Submission, run_id: str | None, **fields: Any) -> SubmitAnswer:
    """A submit after the call's deadline: logged, answered ``deadline_lapsed``."""
    log_event(
        "client_tool.submit_late",
        sessionId=sub.session_id,
        toolCallId=sub.tool_call_id,
        runId=run_id,
        **fields,
    )
    return _unknown(sub.tool_call_id, "deadline_lapsed")


async def _duplicate(ctx: RuntimeContext, owner: SessionState, entry: PendingCall) -> SubmitAnswer:
    """A re-send of a stored, not yet drained answer: never replace it; re-wake (idempotent)."""
    await wake_answered(ctx, owner, entry)
    return SubmitAnswer(
        status="already_completed",
        continuation=_continuation(owner, entry.run_id),
        tool_call_id=entry.tool_call_id,
    )


def _answer_message(tool_call_id: str, submitted_at: int) -> TurnMessage:
    """The wake-up of an answer (a recv message kind of the durable contract)."""
    return {"kind": "answer", "toolCallId": tool_call_id, "submittedAt": submitted_at}


async def wake_answered(ctx: RuntimeContext, owner: SessionState, entry: PendingCall) -> None:
    """Send a stored answer's wake-up; the same key always, so DBOS delivers it at most once.

    A failure is logged, not raised: the answer is stored, and the turn reads it at its
    deadline (or when the reconciler sends the wake-up again).

    A hibernated turn has no workflow to wake: its continuation starts if the batch is
    complete (idempotent), else the answer waits in the row for the rest of the batch.
    """
    if mark_of(owner) is not None:
        if _continuation(owner, entry.run_id).kind == "new_run":
            await start_continuation(ctx, owner)
        return
    if owner.workflow_id is None:
        return
    try:
        await send_to_turn(
            ctx,
            owner.workflow_id,
            _answer_message(entry.tool_call_id, entry.submitted_at or 0),
            names.tool_result_topic(entry.tool_call_id),
            names.submit_idempotency_key(entry.run_id, entry.tool_call_id),
        )
    except Exception as exc:  # the answer is stored; the deadline drain reads it
        log_event(
            "client_tool.send_event_failed",
            sessionId=owner.session_id,
            runId=entry.run_id,
            toolCallId=entry.tool_call_id,
            error=str(exc),
        )
