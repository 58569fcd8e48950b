"""The model step of a turn: the model call, and the commit of its answer, exactly once.

``model_answer`` calls the model on the session's conversation and commits what it answered
in one transaction: the assistant message, its events and usage, and the calls the turn will
park on (their pending entries on the owner, their ownership on the root), or, for a reply
without tool calls, the turn's end. Its checkpoint slot makes it exactly-once: a replay after
the commit returns the committed answer and never calls the model again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ..core.approval_policy import entry_policy
from ..core.events import event
from ..core.llm import LLMRequest, LLMResponse
from ..core.messages import Message
from ..core.session import PendingCall, SessionState, args_digest
from ..errors import HelixError, ProviderError, SessionNotFoundError, with_details
from ..observability import approval_metrics, metrics
from ..observability.log import log_event
from ..store.faults import is_transient
from ..store.store import OWNERSHIP_ATTEMPTS, Fenced, NoChange, guard, now_ms
from . import names, notes
from .context import current
from .deltas import DeltaStream
from .handover import EntryInputs
from .once import FENCED, after_commit, commit_once
from .plan import SUSPENDING_KINDS, plan_calls
from .records import FencedResult, ModelStepResult, PlanItem, TurnSummary
from .steps import ending

__all__ = ["MODEL_ATTEMPTS", "model_answer", "pending_entries", "start_events"]


def _retryable(exc: BaseException) -> bool:
    return (isinstance(exc, ProviderError) and exc.retryable) or is_transient(exc)


#: How a retryable provider error is retried: attempts in all, the first pause and its growth.
MODEL_ATTEMPTS = 4
MODEL_RETRY_INTERVAL_SECONDS = 0.5
MODEL_RETRY_BACKOFF = 2.0


async def model_answer(
    slot: str,
    session_id: str,
    root_session_id: str,
    run_id: str,
    agent_type: str,
    step: int,
    summary: TurnSummary,
    entry: EntryInputs | None = None,
) -> ModelStepResult | FencedResult:
    """Call the model on the session's conversation and commit its answer, exactly once.

    Layout 2: plain workflow code whose checkpoint (``slot``) makes it exactly-once. The
    commit (see ``_commit_model``) appends the assistant message and registers the
    suspending calls. A re-execution after the commit (a replay) returns the committed
    answer: the provider is called again only when nothing was committed. A retryable
    provider error is retried ``MODEL_ATTEMPTS`` times in all, with backoff; the last one is
    raised. ``entry``: the inputs of a new session's first step as its entry committed them
    (``handover``), read from the store otherwise (and on any retry).

    Returns:
        ``{"response", "llm", "plan", "deadlines"}``.
    """
    attempt = 1
    while True:
        try:
            return await _model_once(
                slot, session_id, root_session_id, run_id, agent_type, step, summary, entry
            )
        except Exception as exc:
            if attempt >= MODEL_ATTEMPTS or not _retryable(exc):
                raise
            delay = MODEL_RETRY_INTERVAL_SECONDS * MODEL_RETRY_BACKOFF ** (attempt - 1)
            log_event(
                "turn.model_retry",
                sessionId=session_id,
                runId=run_id,
                attempt=attempt,
                delaySeconds=delay,
                errorCode=getattr(exc, "code", None),
            )
            attempt += 1
            entry = None
            await asyncio.sleep(delay)


async def _model_once(
    slot: str,
    session_id: str,
    root_session_id: str,
    run_id: str,
    agent_type: str,
    step: int,
    summary: TurnSummary,
    entry: EntryInputs | None = None,
) -> ModelStepResult | FencedResult:
    """One attempt of ``model_answer``."""
    ctx = current()
    if entry is not None:
        # A new run of a new session: nothing of it is committed beyond its entry.
        state, done, history = entry.state, None, entry.history
    else:
        try:
            state, done, history = await ctx.store.step_inputs(session_id, slot)
        except SessionNotFoundError:
            # A turn whose entry never committed (its process died in between): no run.
            return {FENCED: "session_missing"}
    if done is not None:
        # An earlier execution committed: its answer, without calling the provider again.
        return done["result"]  # type: ignore[no-any-return]
    try:
        # A stopped or superseded run does not spend a model call.
        guard(state, run_id, ("running",))
    except Fenced as fenced:
        return {FENCED: fenced.reason}
    agent = ctx.registry.get(agent_type)
    request = LLMRequest(
        instructions=agent.instructions,
        messages=history,
        tools=list(agent.tool_schemas),
        session_id=session_id,
        run_id=run_id,
        step=step,
    )
    deltas = DeltaStream(ctx.store, session_id, run_id, step)
    response = await agent.llm.complete(request, on_text=deltas)
    answer = _Answer(
        model={"response": response.model_dump(mode="json"), "llm": agent.llm.name},
        plan=plan_calls(agent, response.tool_calls),
        final_summary=None if response.tool_calls else _final(summary, response),
        retention_ms=int(agent.completed_tombstone_retention * 1000),
        # What is still buffered is written by the step's own commit (no transaction of its own).
        last_delta=deltas.take(),
    )
    try:
        # The row as read before the model call: the commit swaps from it (no second read)
        # and a commit that finds it changed (a stop, a new message) reads it again, locked.
        committed = await _commit_answer(
            slot, session_id, root_session_id, run_id, step, answer, state
        )
    except Fenced as fenced:
        # Stopped or superseded while the model ran: nothing is written, the answer dropped.
        return {FENCED: fenced.reason}
    except HelixError as exc:
        # The model ran (and spent tokens) but its answer could not be committed: the turn
        # fails with this error, and its summary still counts the call.
        raise with_details(exc, modelUsage=response.usage.model_dump()) from exc
    _log_model_commit(session_id, run_id, answer.plan, committed["deadlines"], answer.final_summary)
    return committed


@dataclass(frozen=True, slots=True)
class _Answer:
    """What the model answered, as its commit writes it."""

    model: dict[str, Any]
    """``{"response", "llm"}``: the response as JSON and the adapter's name."""
    plan: list[PlanItem]
    final_summary: TurnSummary | None
    """A reply without tool calls ends the turn: its summary, with this call counted."""
    retention_ms: int
    last_delta: dict[str, Any] | None


def _final(summary: TurnSummary, response: LLMResponse) -> TurnSummary:
    return {
        **summary,
        "steps": summary["steps"] + 1,
        "inputTokens": summary["inputTokens"] + response.usage.input_tokens,
        "outputTokens": summary["outputTokens"] + response.usage.output_tokens,
    }


async def _commit_answer(
    slot: str,
    session_id: str,
    root_session_id: str,
    run_id: str,
    step: int,
    answer: _Answer,
    read: SessionState,
) -> ModelStepResult:
    """Commit ``answer`` under ``slot``, exactly once (``_commit_model``'s transaction), from
    the session's row as ``read`` before the model call.

    Raises:
        Fenced: the run was stopped or superseded while the model ran.
    """

    async def commit() -> ModelStepResult:
        committed = await _commit_model(
            session_id,
            root_session_id,
            run_id,
            step,
            answer.model,
            answer.plan,
            answer.retention_ms,
            answer.final_summary,
            answer.last_delta,
        )
        return {
            "response": answer.model["response"],
            "llm": answer.model["llm"],
            "plan": answer.plan,
            "deadlines": committed["deadlines"],
        }

    return await commit_once(
        slot,
        session_id,
        run_id,
        step,
        commit,
        attempts=OWNERSHIP_ATTEMPTS,
        retry_event="client_tool.ownership_retry",
        failed_event="client_tool.ownership_write_failed",
        session_ids=list(dict.fromkeys([session_id, root_session_id])),
        read_first=False,  # read just before the model call
        read=(read,),
    )


def _log_model_commit(
    session_id: str,
    run_id: str,
    plan: list[PlanItem],
    deadlines: dict[str, int],
    final_summary: TurnSummary | None,
) -> None:
    """The log lines of a committed model answer (after the commit: a retried transaction
    must not log twice)."""
    if final_summary is not None:
        log_event(
            "turn.summary", sessionId=session_id, runId=run_id, outcome="completed", **final_summary
        )
    for item in plan:
        if item["toolCallId"] in deadlines:
            log_event(
                "client_tool.suspended",
                sessionId=session_id,
                runId=run_id,
                toolCallId=item["toolCallId"],
                toolName=item["toolName"],
                deadlineAt=deadlines[item["toolCallId"]],
                kind=item["kind"],
            )


# -- committing the model's answer ----------------------------------------------------------


def pending_entries(
    plan: list[PlanItem], run_id: str, at_ms: int, retention_ms: int
) -> dict[str, PendingCall]:
    entries: dict[str, PendingCall] = {}
    for item in plan:
        if item["kind"] not in SUSPENDING_KINDS:
            continue
        tcid = item["toolCallId"]
        entries[tcid] = PendingCall(
            tool_call_id=tcid,
            tool_name=item["toolName"],
            input=item["input"],
            run_id=run_id,
            kind=item["kind"],
            index=item["index"],
            deadline_at=at_ms + int(item["timeoutSeconds"] * 1000),
            registered_at=at_ms,
            completed_retention_ms=retention_ms,
            approval_id=names.approval_id(run_id, tcid) if item["kind"] == "approval" else None,
            on_timeout=item.get("onTimeout"),
            policy=entry_policy(item.get("approvalPolicy"), at_ms),
            args_digest=args_digest(item["toolName"], item["input"])
            if item["kind"] == "approval"
            else None,
        )
    return entries


def start_events(plan: list[PlanItem], entries: dict[str, PendingCall]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in plan:
        entry = entries.get(item["toolCallId"])
        common = {
            "toolCallId": item["toolCallId"],
            "toolName": item["toolName"],
            "input": item["input"],
        }
        if entry is not None and entry.kind == "approval":
            out.append(
                event(
                    "tool_approval_request",
                    **common,
                    approvalId=entry.approval_id,
                    argsDigest=entry.args_digest,
                    deadlineAt=entry.deadline_at,
                    **({"policy": entry.policy} if entry.policy else {}),
                )
            )
        else:
            extra = {"deadlineAt": entry.deadline_at} if entry is not None else {}
            out.append(event("tool_start", **common, kind=item["kind"], **extra))
    return out


async def _commit_model(
    session_id: str,
    root_session_id: str,
    run_id: str,
    step: int,
    model: dict[str, Any],
    plan: list[PlanItem],
    retention_ms: int,
    final_summary: TurnSummary | None = None,
    last_delta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Commit the assistant message, its events and usage, and register suspending calls.

    In the same transaction, the suspending calls' pending entries are written on this
    (owning) session and their ownership entries on the root. With ``final_summary`` (a reply
    without tool calls) the same transaction also ends the turn ``completed``.

    Returns:
        ``{"deadlines": {toolCallId: deadlineAt}}`` for the calls the turn will park on.
    """
    ctx = current()
    response = LLMResponse.model_validate(model["response"])
    at = now_ms()
    await ctx.store.append_messages(
        session_id,
        run_id,
        [Message(role="assistant", content=response.text, tool_calls=response.tool_calls)],
    )
    await ctx.store.record_usage(
        [
            metrics.token_row(
                response.usage,
                session_id=session_id,
                run_id=run_id,
                step=step,
                llm_name=model.get("llm", "llm"),
                at_ms=at,
            )
        ]
    )
    entries = pending_entries(plan, run_id, at, retention_ms)

    def register(states: dict[str, SessionState]) -> None:
        # The fence: only the session's live run, still running, commits its model's answer.
        owner, root = states[session_id], states[root_session_id]
        guard(owner, run_id, ("running",))
        if final_summary is not None:
            ending("completed", None)({session_id: owner})
        elif not entries:
            raise NoChange(None)
        owner.pending.update(entries)
        if entries:
            owner.status = "suspended_client_tool"
        for tcid in entries:
            root.ownership[tcid] = session_id

    await ctx.store.update([session_id, root_session_id], register)
    new_events: list[dict[str, Any]] = [last_delta] if last_delta is not None else []
    if response.text:
        new_events.append(event("text", text=response.text, step=step))
    new_events.extend(start_events(plan, entries))
    if entries:
        new_events.append(event("suspended", toolCallIds=list(entries), reason=_reason(entries)))
    if final_summary is not None:
        new_events.append(event("turn_end", outcome="completed", text=response.text))
        after_commit(lambda: approval_metrics.record_turn("completed"))
    await ctx.store.append_events(session_id, run_id, new_events)
    # The hooks' events of the parked calls, in this transaction (``notes.py``).
    await notes.write(notes.park_rows(session_id, root_session_id, plan, entries))
    return {"deadlines": {k: v.deadline_at for k, v in entries.items()}, "at": at}


def _reason(entries: dict[str, PendingCall]) -> str:
    """A suspension's ``reason``: ``approval`` when it waits on approvals only."""
    return "approval" if all(e.kind == "approval" for e in entries.values()) else "client_tool"
