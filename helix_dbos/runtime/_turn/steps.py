"""The durable steps of a turn: the model step, then the steps after the model call.

``model_answer`` calls the model on the session's conversation and commits what it answered
in one transaction: the assistant message, its events and usage, and the calls the turn will
park on (their pending entries on the owner, their ownership on the root), or, for a reply
without tool calls, the turn's end. Its checkpoint slot makes it exactly-once: a replay after
the commit returns the committed answer and never calls the model again.

After the model call: server tools, reading a batch's answers, committing its results
(``commit_results``), and the turn's end (``finish_turn``). Every step that writes session
state is exactly-once (see ``_commits/once.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, cast

from dbos import DBOS

from ...core.approval_policy import entry_policy
from ...core.events import event
from ...core.humanize import humanize_client_tool_error
from ...core.llm import LLMRequest, LLMResponse
from ...core.markers import mark_entry_input
from ...core.messages import Message
from ...core.session import PendingCall, SessionState, Tombstone, args_digest, stop_pending
from ...errors import HelixError, ProviderError, SessionNotFoundError, with_details
from ...observability import approval_metrics, metrics
from ...observability.log import log_event
from ...store import (
    OWNERSHIP_ATTEMPTS,
    Fenced,
    NoChange,
    RetryTransaction,
    decisions_expiry_row,
    decisions_queue,
    guard,
    is_transient,
    now_ms,
)
from .. import names
from .._commits.once import (
    FENCED,
    CommitContext,
    Policy,
    after_commit,
    commit_once,
    exactly_once,
    running,
)
from .._commits.opening import ACTIVE_STATUSES
from .._context import current
from .._notifications import outbox_rows
from .._triage import SUSPENDING_KINDS, plan_calls
from ..records import (
    CHILD_ENDS_KEY,
    HIBERNATED_KEY,
    PERSISTENT_KEY,
    STASH_KEY,
    CollectedAnswers,
    CommittedResults,
    EntryStash,
    FencedResult,
    FinishResult,
    ModelStepResult,
    PlanItem,
    ToolResult,
    TurnError,
    TurnSummary,
    WokenAnswers,
)
from .deltas import DeltaStream
from .resolve import end_fields, resolve_call

__all__ = [
    "MODEL_ATTEMPTS",
    "collect_answers",
    "commit_results",
    "ending",
    "finish_turn",
    "log_settled",
    "model_answer",
    "pending_entries",
    "rebind",
    "start_events",
    "tool_result_message",
]


def _retryable(exc: BaseException) -> bool:
    return (isinstance(exc, ProviderError) and exc.retryable) or is_transient(exc)


#: How a retryable provider error is retried: attempts in all, the first pause and its growth.
MODEL_ATTEMPTS = 4
MODEL_RETRY_INTERVAL_SECONDS = 0.5
MODEL_RETRY_BACKOFF = 2.0


async def model_answer(
    context: CommitContext,
    session_id: str,
    root_session_id: str,
    run_id: str,
    agent_type: str,
    step: int,
    summary: TurnSummary,
) -> ModelStepResult | FencedResult:
    """Call the model on the session's conversation and commit its answer, exactly once.

    Layout 2: plain workflow code whose checkpoint (``context.slot``) makes it exactly-once.
    The commit (see ``_commit_model``) appends the assistant message and registers the
    suspending calls. A re-execution after the commit (a replay) returns the committed
    answer: the provider is called again only when nothing was committed. A retryable
    provider error is retried ``MODEL_ATTEMPTS`` times in all, with backoff; the last one is
    raised. The step starts from ``context.inputs`` when the commit before it handed them on
    (``_handover``), and reads them from the store otherwise (and on any retry).

    Returns:
        ``{"response", "llm", "plan", "deadlines"}``.
    """
    attempt = 1
    while True:
        try:
            return await _model_once(
                context, session_id, root_session_id, run_id, agent_type, step, summary
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
            context = CommitContext(context.slot)  # a retry reads its inputs itself
            await asyncio.sleep(delay)


async def _model_once(
    context: CommitContext,
    session_id: str,
    root_session_id: str,
    run_id: str,
    agent_type: str,
    step: int,
    summary: TurnSummary,
) -> ModelStepResult | FencedResult:
    """One attempt of ``model_answer``."""
    ctx = current()
    if context.inputs is not None:
        # Handed on by the commit before: nothing of this step is committed yet.
        state, done, history = context.inputs.state, None, context.inputs.history
    else:
        try:
            state, done, history = await ctx.store.step_inputs(session_id, context.slot)
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
    await agent.refresh_toolsets()  # an MCP server's tools, listed again when stale
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
            CommitContext(context.slot, read=(state,)),
            session_id,
            root_session_id,
            run_id,
            step,
            answer,
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


#: A model step's commit: read just before the model call, it does not read its slot first.
_MODEL_POLICY = Policy(
    read_first=False,
    attempts=OWNERSHIP_ATTEMPTS,
    retry_event="client_tool.ownership_retry",
    failed_event="client_tool.ownership_write_failed",
)


async def _commit_answer(
    context: CommitContext,
    session_id: str,
    root_session_id: str,
    run_id: str,
    step: int,
    answer: _Answer,
) -> ModelStepResult:
    """Commit ``answer`` under ``context`` (its slot, and the session's row as read before
    the model call), exactly once (``_commit_model``'s transaction).

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
        context,
        session_id,
        run_id,
        commit,
        step_count=step,
        policy=_MODEL_POLICY,
        session_ids=list(dict.fromkeys([session_id, root_session_id])),
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
    # The hooks' events of the parked calls, in this transaction (``_notifications/outbox_rows.py``).
    await outbox_rows.write(outbox_rows.park_rows(session_id, root_session_id, plan, entries))
    return {"deadlines": {k: v.deadline_at for k, v in entries.items()}, "at": at}


def _reason(entries: dict[str, PendingCall]) -> str:
    """A suspension's ``reason``: ``approval`` when it waits on approvals only."""
    return "approval" if all(e.kind == "approval" for e in entries.values()) else "client_tool"


R = TypeVar("R")
P = ParamSpec("P")


#: How long a turn woken with an answer waits for that answer's commit to become visible.
ANSWER_VISIBILITY_MS = 10_000


# -- parking and draining -------------------------------------------------------------------


@DBOS.step(name=names.COLLECT_ANSWERS_STEP)
async def collect_answers(
    session_id: str, run_id: str, tool_call_ids: list[str], woken: WokenAnswers | None = None
) -> CollectedAnswers:
    """Read the stored answers of a batch (and whether a new message abandons the rest).

    ``woken`` maps the calls the turn was woken for with an answer to that answer's time: the
    read waits until each of those answers is visible (see ``await_visible``).
    """
    store = current().store

    async def read() -> CollectedAnswers:
        state = await store.get(session_id)
        await_visible(state, woken or {}, now_ms())
        stash: EntryStash | None = state.metadata.get(STASH_KEY)
        abandon = bool(stash and stash.get("abandonPending"))
        answers: dict[str, dict[str, Any] | None] = {}
        for tcid in tool_call_ids:
            entry = state.pending.get(tcid)
            answers[tcid] = entry.dump() if entry is not None and entry.run_id == run_id else None
        return {"answers": answers, "abandon": abandon}

    return await store.transact(read)


def await_visible(owner: SessionState, woken: WokenAnswers, at: int) -> None:
    """Retry the transaction while a call the turn was woken for shows no stored answer.

    A wake-up may land before its answer is visible to this transaction; resolving the call
    then would turn an accepted answer into a timeout. After ``ANSWER_VISIBILITY_MS`` the
    stored state is taken as it is (the wake-up was not an answer after all).

    Raises:
        RetryTransaction: an answer the turn was woken for is not visible yet.
    """
    for tcid, sent_at in woken.items():
        entry = owner.pending.get(tcid)
        if entry is None or entry.submitted_at is not None:
            continue
        if at - sent_at < ANSWER_VISIBILITY_MS:
            raise RetryTransaction(f"the answer to {tcid} is not visible yet")


def tool_result_message(result: ToolResult) -> Message:
    """The tool message the model reads for one call's outcome. An expired call's row also
    says so (``meta.expired``: the policy applied), which the model does not read."""
    expired = result.get("outcome") == "timeout"
    meta = {"expired": {"onTimeout": result.get("onTimeout", "error")}} if expired else None
    if result.get("ok"):
        value = result.get("result")
        return Message(
            role="tool",
            tool_call_id=result["toolCallId"],
            tool_name=result["toolName"],
            content=json.dumps(value),
            result=value,
            meta=meta,
        )
    code = result.get("errorCode")
    text = result.get("error") or humanize_client_tool_error(code or "", result["toolName"])
    return Message(
        role="tool",
        tool_call_id=result["toolCallId"],
        tool_name=result["toolName"],
        content=text,
        is_error=True,
        error_code=code,
        meta=meta,
    )


def rebind(owner: SessionState, workflow_id: str, at: int) -> None:
    """The continuation ``workflow_id`` runs the turn from now on: the row names it, and the
    hibernation mark goes."""
    owner.workflow_id = workflow_id
    owner.metadata.pop(HIBERNATED_KEY, None)
    if PERSISTENT_KEY in owner.metadata:
        # A persistent session's continuation takes its next messages too.
        owner.metadata[PERSISTENT_KEY] = {"workflowId": workflow_id, "since": at}


def _forget_child_ends(owner: SessionState, plan: list[PlanItem]) -> None:
    """Drop the ends the step's sub-agents reported (``hibernation.child_ended``): their
    results are committed now."""
    ends = owner.metadata.get(CHILD_ENDS_KEY)
    if not ends:
        return
    for item in plan:
        ends.pop(item["toolCallId"], None)
    if not ends:
        del owner.metadata[CHILD_ENDS_KEY]


@exactly_once(
    names.COMMIT_RESULTS_STEP,
    "results",
    policy=Policy(
        # Once committed, the run has moved on (its guard fails) or, for server tools only,
        # the tool results' unique index refuses a second copy: no read of the slot first.
        read_first=False,
        retry_event="client_tool.clear_pending_retry",
        failed_event="client_tool.clear_failed_exhausted",
    ),
)
async def commit_results(
    session_id: str,
    root_session_id: str,
    run_id: str,
    next_run: str,
    plan: list[PlanItem],
    given: dict[str, ToolResult],
    woken: WokenAnswers | None = None,
) -> CommittedResults:
    """Append one tool result per call in the model's order, and settle the suspending calls.

    ``given`` holds the results already known (server tools, sub-agents, resolved approvals);
    every other suspending call is resolved here, from its stored pending entry read in this
    transaction. In one transaction: the results (then a stashed new message, if one waits),
    the pending and ownership entries cleared, tombstones written on the root, wait and
    outcome metrics, ``tool_end`` events, and the session moved to the continuation run.

    Fenced: only the session's live run, still active, settles its calls; a stopped or
    superseded run writes nothing (``{"fenced": reason}``).

    Its ``CommitContext`` (``once.running()``): ``resumption``, the session's rows and
    conversation as read when the turn woke (layout 2): the commit swaps from those rows, and
    is then one statement with no transaction around it; it hands the next model step its
    inputs (``Resumption``). ``rebind``: the workflow that continues a hibernated turn: the
    session's row names it from this commit on (its next batch's wake-ups go to it), and the
    hibernation mark is removed.

    Returns:
        ``{"results": [...]}`` in the model's order (recorded, so a replay reads the same).
    """
    ctx = current()
    context = running()
    at = now_ms()
    saved: SessionState | None = None
    stash: EntryStash | None = None
    if any(item["kind"] in SUSPENDING_KINDS for item in plan):
        settle = _Settle(session_id, root_session_id, run_id, next_run, plan, given, at)
        committed, (results, stash) = await ctx.store.update(
            [session_id, root_session_id], settle.with_wake(woken, context.rebind)
        )
        saved = committed[session_id]
        # The expiries' policy outcomes, on the decision record with the commit.
        await decisions_queue([decisions_expiry_row(saved, e, p, at) for e, p in settle.expired])
    else:
        await ctx.store.update([session_id], _fence(session_id, run_id, plan, context.rebind, at))
        results = [given[item["toolCallId"]] for item in plan]
    message = stash.get("message") if stash else None
    new_messages = [tool_result_message(r) for r in results]
    if message:
        # The message is the continuation run's own input (a retry of that run finds it).
        new_messages.append(mark_entry_input(Message(role="user", content=message), next_run))
    await ctx.store.append_messages(session_id, run_id, new_messages)
    suspended = [r for r in results if r.get("suspended")]
    await ctx.store.record_usage(_wait_rows(session_id, run_id, suspended, at))
    await outbox_rows.write(
        outbox_rows.settle_rows(session_id, root_session_id, run_id, plan, suspended, at)
    )
    after_commit(lambda: approval_metrics.record_results(suspended))
    await ctx.store.append_events(session_id, run_id, _end_events(results, message))
    out: CommittedResults = {"results": results, "stashedMessage": bool(message)}
    if context.resumption is not None and saved is not None:
        context.resumption.offer(out, saved, new_messages)
    return out


class _Settle:
    """The results commit's mutation of the owner's and the root's rows (pure: it may run
    again on a retried transaction): fence the run, pop the stash, resolve each suspending
    call from its stored entry, clear the pending and ownership entries, write the root's
    tombstones, and move the session to the continuation run."""

    __slots__ = ("at", "expired", "given", "next_run", "plan", "root_id", "run_id",
                 "session_id", "woken", "workflow_id")  # fmt: skip

    def __init__(
        self,
        session_id: str,
        root_id: str,
        run_id: str,
        next_run: str,
        plan: list[PlanItem],
        given: dict[str, ToolResult],
        at: int,
    ) -> None:
        self.session_id, self.root_id, self.run_id = session_id, root_id, run_id
        self.next_run, self.plan, self.given, self.at = next_run, plan, given, at
        self.woken: WokenAnswers = {}
        self.workflow_id: str | None = None
        self.expired: list[tuple[PendingCall, str]] = []
        """The approvals whose deadline lapsed, with the policy applied (their record)."""

    def with_wake(self, woken: WokenAnswers | None, workflow_id: str | None) -> _Settle:
        """The answers' times the turn was woken by, and the workflow that continues it."""
        self.woken, self.workflow_id = woken or {}, workflow_id
        return self

    def __call__(
        self, states: dict[str, SessionState]
    ) -> tuple[list[ToolResult], EntryStash | None]:
        owner, root = states[self.session_id], states[self.root_id]
        guard(owner, self.run_id, ACTIVE_STATUSES)
        await_visible(owner, self.woken, self.at)
        stash: EntryStash | None = owner.metadata.pop(STASH_KEY, None)
        abandon = bool(stash and stash.get("abandonPending"))
        _forget_child_ends(owner, self.plan)
        resolved = dict(self.given)
        self.expired = []
        ids = []
        for item in self.plan:
            if item["kind"] in SUSPENDING_KINDS:
                ids.append(item["toolCallId"])
                self._settle_call(owner, root, item, resolved, abandon)
        _reap_tombstones(root, self.at, keep=set(ids))
        owner.status = "running"
        owner.run_id = self.next_run
        if self.workflow_id is not None:
            rebind(owner, self.workflow_id, self.at)
        return [resolved[item["toolCallId"]] for item in self.plan], stash

    def _settle_call(
        self,
        owner: SessionState,
        root: SessionState,
        item: PlanItem,
        resolved: dict[str, ToolResult],
        abandon: bool,
    ) -> None:
        """Resolve one suspending call (unless its result is given) and leave its tombstone."""
        tcid = item["toolCallId"]
        entry = owner.pending.pop(tcid, None)
        if tcid not in resolved:
            current_entry = (
                entry.dump() if entry is not None and entry.run_id == self.run_id else None
            )
            resolved[tcid] = resolve_call(item, current_entry, abandon)
        result = resolved[tcid]
        if entry is not None and entry.kind == "approval" and result["outcome"] == "timeout":
            self.expired.append((entry, result.get("onTimeout", "error")))
        root.ownership.pop(tcid, None)
        root.completed[tcid] = Tombstone(
            completed_at=self.at,
            outcome=resolved[tcid]["outcome"],
            run_id=self.run_id,
            owner_session_id=self.session_id,
            retention_ms=entry.completed_retention_ms if entry else 0,
        )


def _fence(
    session_id: str, run_id: str, plan: list[PlanItem], workflow_id: str | None, at: int
) -> Callable[[dict[str, SessionState]], None]:
    """The results commit's mutation for a batch with no suspending call: fence the run, and
    name the continuing workflow (a turn continued after it waited on its sub-agent)."""

    def fence(states: dict[str, SessionState]) -> None:
        owner = states[session_id]
        guard(owner, run_id, ACTIVE_STATUSES)
        if workflow_id is None and CHILD_ENDS_KEY not in owner.metadata:
            raise NoChange(None)
        _forget_child_ends(owner, plan)
        if workflow_id is not None:
            rebind(owner, workflow_id, at)

    return fence


def _wait_rows(
    session_id: str, run_id: str, suspended: list[ToolResult], at: int
) -> list[dict[str, Any]]:
    """The usage rows of a batch's suspended calls: each one's wait, and each timeout."""
    rows: list[dict[str, Any]] = []
    for r in suspended:
        common: dict[str, Any] = {
            "session_id": session_id,
            "run_id": run_id,
            "tool_call_id": r["toolCallId"],
            "tool_name": r["toolName"],
            "at_ms": at,
        }
        rows.append(metrics.wait_row(wait_ms=r.get("waitMs", 0), **common))
        if r["outcome"] == "timeout":
            rows.append(metrics.counter_row(metrics.CLIENT_TOOL_TIMEOUT, **common))
    return rows


def _end_events(results: list[ToolResult], message: str | None) -> list[dict[str, Any]]:
    """A ``tool_end`` event per result, in the model's order, then the stashed message's."""
    events = []
    for r in results:
        data: dict[str, Any] = {"toolCallId": r["toolCallId"], "toolName": r["toolName"]}
        if r.get("ok"):
            data["output"] = r.get("result")
        else:
            # The seed's shape: ``error`` is the text the model reads (a submitted error
            # verbatim), ``errorCode`` the machine code for aggregation.
            data["error"] = tool_result_message(r).content
            data["errorCode"] = r.get("errorCode") or "tool_error"
        data.update(end_fields(r))  # how a suspended call's wait ended
        events.append(event("tool_end", **data))
    if message:
        events.append(event("user_message", text=message))
    return events


def log_settled(session_id: str, run_id: str, results: list[ToolResult]) -> None:
    """The log lines of committed results (after the commit: a retried transaction must not
    log twice)."""
    for r in results:
        if r.get("outcome") == "timeout":
            log_event(
                "client_tool.timeout",
                sessionId=session_id,
                runId=run_id,
                toolCallId=r["toolCallId"],
                toolName=r["toolName"],
                deadlineAt=r.get("deadlineAt"),
                policy=r.get("onTimeout", "error"),
            )


def _reap_tombstones(root: SessionState, at: int, keep: set[str]) -> None:
    # Markers are reaped on the next marker write; retention 0 means "reap at the next write".
    for tcid in [
        k
        for k, t in root.completed.items()
        if k not in keep and t.completed_at + t.retention_ms <= at
    ]:
        del root.completed[tcid]


# -- the end of a turn ----------------------------------------------------------------------


def ending(status: str, error: TurnError | None) -> Callable[[dict[str, SessionState]], None]:
    """A mutation that ends a session's turn with ``status``."""

    def end(states: dict[str, SessionState]) -> None:
        for state in states.values():
            state.status = status  # type: ignore[assignment]
            state.error = cast("dict[str, Any] | None", error)  # a TurnError is a plain dict
            if status != "failed":
                # A failed turn keeps a stashed message: a retry drains it (never lost).
                state.metadata.pop(STASH_KEY, None)

    return end


# Once ended, its guard fails: no read of the slot first.
@exactly_once(names.FINISH_STEP, "finish", policy=Policy(read_first=False))
async def finish_turn(
    session_id: str,
    run_id: str,
    outcome: str,
    text: str,
    error: TurnError | None,
    summary: TurnSummary,
    root_session_id: str | None = None,
) -> FinishResult:
    """Record the turn's end: status, error and the ``turn_end`` event.

    A turn that ends with calls still pending (it failed while they waited) clears them and
    their ownership entries on the root, with ``stopped`` tombstones: a late submit answers
    ``run_stopped``, never ``accepted`` for an answer nothing would apply.

    Fenced like every step commit: a stopped or superseded run records nothing.
    """
    ctx = current()
    status = "completed" if outcome == "completed" else "failed"
    end = ending(status, error)
    root_id = root_session_id or session_id
    at = now_ms()

    def finish(states: dict[str, SessionState]) -> list[PendingCall]:
        owner, root = states[session_id], states[root_id]
        guard(owner, run_id, ACTIVE_STATUSES)
        cleared = stop_pending(owner, root, at)
        end({session_id: owner})
        return cleared

    _, cleared = await ctx.store.update([session_id, root_id], finish)
    await outbox_rows.write(outbox_rows.stop_rows(root_id, [(session_id, e) for e in cleared], at))
    await ctx.store.append_events(
        session_id,
        run_id,
        [event("turn_end", outcome=outcome, text=text, **({"error": error} if error else {}))],
    )
    after_commit(lambda: approval_metrics.record_turn(outcome))
    return {"outcome": outcome, "summary": summary}
