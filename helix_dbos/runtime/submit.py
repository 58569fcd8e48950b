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

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from ..core.session import (
    Continuation,
    PendingCall,
    SessionState,
    SubmitAnswer,
    args_digest,
    batch_of,
    is_batch_ready_at_last_submit,
)
from ..errors import (
    ApprovalMismatchError,
    ErrorCode,
    HelixError,
    InvalidResultError,
    PayloadTooLargeError,
    RequestValidationError,
    RunSupersededError,
    SessionNotFoundError,
)
from ..observability import approval_metrics
from ..observability.log import describe_issues, log_event
from ..store.store import NoChange, Prior, RetryTransaction, now_ms
from . import names, notes
from .batch_job import continue_batch
from .context import RuntimeContext
from .continuation import start_continuation
from .entry import ACTIVE_STATUSES
from .hibernation import mark_of, on_answer
from .records import TurnMessage
from .wake import SendNotEnlisted, send_in_transaction, send_to_turn, wake_local

__all__ = [
    "MISSING",
    "Submission",
    "measure_result_bytes",
    "precheck",
    "submit",
    "wake_answered",
]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Marks an absent ``result`` (``None`` is a valid result)."""


@dataclass(frozen=True)
class Submission:
    """One submit, as the Python API and the HTTP route receive it."""

    session_id: str
    tool_call_id: str
    kind: Literal["client-tool-result", "approval-response"] = "client-tool-result"
    result: Any = MISSING
    error: str | None = None
    approval_id: str | None = None
    approved: bool | None = None
    reason: str | None = None
    edited_input: dict[str, Any] | None = None
    shown_input: dict[str, Any] | None = None
    """For approvals: the arguments the human saw; must match the call's digest."""


def measure_result_bytes(result: Any) -> int:
    """The UTF-8 byte length of the result's compact JSON (the submit size limit's measure).

    Raises:
        TypeError, ValueError: the result is not JSON (an object JSON cannot encode, NaN or
            Infinity, text with a lone surrogate).
    """
    encoded = json.dumps(result, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if "\x00" in encoded or "\\u0000" in encoded:
        # Postgres text and JSONB cannot hold NUL: such a result could never be stored.
        raise ValueError("NUL character")
    return len(encoded.encode("utf-8"))


def _unknown(tool_call_id: str, reason: str | None = None) -> SubmitAnswer:
    return SubmitAnswer(status="unknown_tool_call", reason=reason, tool_call_id=tool_call_id)


def _continuation(owner: SessionState, run_id: str) -> Continuation:
    batch = batch_of(owner.pending, run_id)
    if not batch:
        return Continuation(kind="consumed")
    if is_batch_ready_at_last_submit(batch):
        return Continuation(kind="new_run", run_id=names.next_run_id(run_id))
    return Continuation(kind="awaiting_batch")


def _check(sub: Submission, ctx: RuntimeContext) -> None:
    """Shape and size checks that need no read (nothing is read or stored before them).

    A submitted ``error`` string and a denial's ``reason`` count against the result size limit
    like a result does: each is stored, streamed and shown to the model.
    """
    if sub.kind == "client-tool-result":
        if (sub.result is MISSING) == (sub.error is None):
            raise RequestValidationError(
                "The submit is not a valid client-tool answer or approval",
                cause="result_or_error",
            )
        if sub.error is not None and "\x00" in sub.error:
            raise RequestValidationError(
                "The submit is not a valid client-tool answer or approval", cause="error_not_text"
            )
        if sub.error is None:
            try:
                size = measure_result_bytes(sub.result)
            except (TypeError, ValueError):
                # Not JSON: it could never be stored, so refuse it typed before any read.
                raise RequestValidationError(
                    "The submit is not a valid client-tool answer or approval",
                    cause="result_not_json",
                ) from None
        else:
            size = len(sub.error.encode("utf-8"))
    elif sub.approval_id is None or sub.approved is None:
        raise RequestValidationError(
            "The submit is not a valid client-tool answer or approval", cause="approval_fields"
        )
    else:
        size = len(sub.reason.encode("utf-8")) if sub.reason is not None else 0
    limit = ctx.settings.max_result_bytes
    if size > limit:
        log_event(
            "submit_tool_result.result_too_large",
            sessionId=sub.session_id,
            toolCallId=sub.tool_call_id,
            sizeBytes=size,
            limitBytes=limit,
        )
        raise PayloadTooLargeError("tool_result", limit, size)


def _response(
    sub: Submission,
    entry: PendingCall,
    ctx: RuntimeContext,
    tool_input_model: Any,
    output_model: Any,
) -> dict[str, Any]:
    """Validate the answer against the call and build what is stored on the entry."""
    if sub.kind == "client-tool-result":
        if entry.kind != "client":
            raise RequestValidationError(
                "This call awaits an approval-response, not a client-tool-result",
                toolCallId=sub.tool_call_id,
            )
        if sub.error is not None:
            return {"error": _scrub(ctx, sub.error)}
        if output_model is not None:
            try:
                output_model.model_validate(sub.result)
            except ValidationError as exc:
                log_event(
                    "client_tool.validation_failed",
                    sessionId=sub.session_id,
                    toolCallId=sub.tool_call_id,
                    toolName=entry.tool_name,
                    code=ErrorCode.INVALID_RESULT.value,
                    # Where and why the result failed its schema; never the result itself.
                    error=describe_issues(exc.errors(include_url=False, include_input=False)),
                )
                raise InvalidResultError(
                    entry.tool_name, sub.tool_call_id, exc.errors(include_url=False)
                ) from None
        return {"result": sub.result}
    if entry.kind != "approval":
        raise RequestValidationError(
            "This call awaits a client-tool-result, not an approval-response",
            toolCallId=sub.tool_call_id,
        )
    if sub.approval_id != entry.approval_id:
        raise ApprovalMismatchError(
            "The approvalId does not match the pending approval", toolCallId=sub.tool_call_id
        )
    if (
        sub.shown_input is not None
        and args_digest(entry.tool_name, sub.shown_input) != entry.args_digest
    ):
        raise ApprovalMismatchError(
            "The approval was given for other arguments than the call's",
            toolCallId=sub.tool_call_id,
        )
    decision: dict[str, Any] = {"approved": bool(sub.approved)}
    if sub.reason is not None:
        decision["reason"] = _scrub(ctx, sub.reason)
    if sub.edited_input is not None:
        if not sub.approved:
            raise RequestValidationError("Edited arguments come with an approval, not a denial")
        try:
            tool_input_model.model_validate(sub.edited_input)
        except ValidationError:
            # The edit failed the tool's INPUT schema: not an invalid (output) result.
            raise RequestValidationError(
                "The edited arguments failed the tool's input schema",
                cause="edited_input",
                toolName=entry.tool_name,
                toolCallId=sub.tool_call_id,
            ) from None
        decision["editedInput"] = sub.edited_input
    return decision


def _scrub(ctx: RuntimeContext, text: str) -> str:
    scrubber = ctx.scrubber
    return scrubber(text) if callable(scrubber) else text


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
    _check(sub, ctx)
    root = await ctx.store.load(sub.session_id)
    owner_id = root.ownership.get(sub.tool_call_id) if root is not None else None
    if root is None or owner_id is None:
        return
    owner = root if owner_id == root.session_id else await ctx.store.load(owner_id)
    entry = owner.pending.get(sub.tool_call_id) if owner is not None else None
    if owner is None or entry is None or entry.submitted_at is not None:
        return
    known = sub.error is None or owner.agent_type in ctx.registry
    tool = ctx.registry.get(owner.agent_type).tool(entry.tool_name) if known else None
    _response(
        sub, entry, ctx, tool.input_model if tool else None, tool.output_model if tool else None
    )


@dataclass(frozen=True, slots=True)
class _Verdict:
    """What one submit's transaction decided (logged and answered after it committed)."""

    outcome: Literal["accepted", "duplicate", "unknown", "tombstone", "lapsed"]
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
    # An error skips validation, so it needs no agent definition (the CLI's fail-call).
    known = sub.error is None or owner.agent_type in ctx.registry
    tool = ctx.registry.get(owner.agent_type).tool(entry.tool_name) if known else None
    response = _response(
        sub, entry, ctx, tool.input_model if tool else None, tool.output_model if tool else None
    )
    at = now_ms()
    if entry.lapsed_by(at):
        return _Verdict("lapsed", owner, entry, at=at)
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

    The root's row routes the call (the owner is the root itself unless a sub-agent made the
    call, whose row is then locked and read); the answer is stored by compare-and-swap and its
    wake-up message enlisted with it. The root is read once, unlocked, and the transaction
    swaps from it (``store.Prior``): on the common path a submit is that read and one
    statement, with no transaction around it.

    Returns the answer and the call's tool (empty when the call was not found).
    """
    _check(sub, ctx)
    store = ctx.store
    tcid = sub.tool_call_id
    enlist = ctx.client is not None

    def decide(states: dict[str, SessionState], owner_id: str) -> _Verdict:
        owner = states[owner_id]
        verdict = _store_answer(sub, ctx, owner)
        if verdict.outcome != "accepted":
            raise NoChange(verdict)
        assert verdict.entry is not None
        run_id = verdict.entry.run_id
        # A hibernated turn's mark says when its batch falls due: now, once it is complete.
        on_answer(owner, run_id, _continuation(owner, run_id).kind == "new_run")
        return verdict

    async def store_and_send(conn: Any) -> _Verdict:
        # The answer and its wake-up message commit together: no window where one exists
        # without the other. The message carries the answer's time, so the woken turn knows
        # which answer to wait for (see ``steps.await_visible``).
        nonlocal enlist

        def at_root(states: dict[str, SessionState]) -> _Verdict | str:
            routed = _route(sub, states[sub.session_id])
            if isinstance(routed, _Verdict):
                raise NoChange(routed)
            if routed != sub.session_id:
                raise NoChange(routed)  # a sub-agent's call: its row is locked next
            return decide(states, routed)

        try:
            saved, routed = await store.update([sub.session_id], at_root, conn=conn, prior=prior)
            if isinstance(routed, str):
                owner_id = routed

                def at_owner(states: dict[str, SessionState]) -> _Verdict:
                    return decide(states, owner_id)

                saved, verdict = await store.update([owner_id], at_owner, conn=conn)
            else:
                verdict = routed
        except SessionNotFoundError as missing:
            reason = (
                "root_state_not_found"
                if missing.details.get("sessionId") == sub.session_id
                else "ownership_missing_toolcall"
            )
            return _Verdict("unknown", reason=reason)
        if verdict.outcome != "accepted":
            return verdict
        assert verdict.owner is not None and verdict.entry is not None
        owner = saved[verdict.owner.session_id]
        # The hooks' ``resolved`` event of this answer commits with it (``notes.py``).
        rows = notes.answer_rows(owner, owner.pending[tcid], verdict.at)
        await notes.write(conn, rows, in_commit=False)
        sent = "skipped"
        if mark_of(owner) is not None:
            sent = "hibernated"  # no workflow waits: the continuation starts after the commit
        elif owner.workflow_id is not None:
            if not enlist:
                sent = "failed" if ctx.client is not None else "unavailable"
            else:
                try:
                    await send_in_transaction(
                        ctx,
                        conn,
                        owner.workflow_id,
                        _answer_message(tcid, verdict.at),
                        names.tool_result_topic(tcid),
                        names.submit_idempotency_key(verdict.entry.run_id, tcid),
                        sessionId=owner.session_id,
                        runId=verdict.entry.run_id,
                    )
                except SendNotEnlisted:
                    # Run the whole transaction again without it; the send follows the commit.
                    enlist = False
                    raise RetryTransaction("the wake-up could not be enlisted", 0.0) from None
                sent = "sent"
        return _Verdict("accepted", owner, owner.pending[tcid], at=verdict.at, sent=sent)

    # The root as it is now, unlocked: the transaction swaps from it, so a submit is this read
    # and one statement. A row changed meanwhile (another answer of the batch) fails the swap,
    # and the transaction runs again from the root's row locked.
    root = await store.load(sub.session_id)
    if root is None:
        # No session, no call to answer (one created after this read has no call pending).
        verdict = _Verdict("unknown", reason="root_state_not_found")
    else:
        prior = Prior(root)
        verdict = await store.transact(store_and_send, lean=True)
    owner, entry = verdict.owner, verdict.entry
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
    assert owner is not None and entry is not None
    if verdict.outcome == "lapsed":
        late = _late(
            sub,
            entry.run_id,
            toolName=entry.tool_name,
            deadlineAt=entry.deadline_at,
            submittedAt=verdict.at,
        )
        return late, entry.tool_name
    if verdict.outcome == "duplicate":
        return await _duplicate(ctx, owner, entry), entry.tool_name
    log_event(
        "client_tool.submitted",
        sessionId=sub.session_id,
        ownerSessionId=owner.session_id,
        runId=entry.run_id,
        toolCallId=tcid,
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
        wake_local(owner.workflow_id, names.tool_result_topic(tcid))
    elif verdict.sent in ("unavailable", "failed"):
        # The answer is stored; its wake-up could not ride in the transaction: send it now.
        await wake_answered(ctx, owner, entry)
    accepted = SubmitAnswer(
        status="accepted",
        continuation=continuation,
        tool_call_id=tcid,
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
