"""The durable steps of a turn: the model call with the commit of its answer, server tools,
reading a batch's answers, committing its results, and the turn's end.

Every step that writes session state is exactly-once (see ``once.py``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

from dbos import DBOS
from pydantic import BaseModel, ValidationError

from ..core.events import event
from ..core.humanize import humanize_client_tool_error
from ..core.llm import LLMRequest, LLMResponse
from ..core.markers import mark_entry_input
from ..core.messages import Message
from ..core.session import PendingCall, SessionState, Tombstone, args_digest, stop_pending
from ..errors import HelixError, ProviderError, SessionNotFoundError, with_details
from ..observability import approval_metrics, metrics
from ..observability.log import log_event
from ..store.faults import is_transient
from ..store.store import (
    OWNERSHIP_ATTEMPTS,
    Fenced,
    NoChange,
    Prior,
    RetryTransaction,
    guard,
    now_ms,
)
from . import names, notes
from .context import current
from .deltas import DeltaStream
from .entry import ACTIVE_STATUSES
from .handover import EntryInputs, Resumption
from .once import FENCED, after_commit, commit_once, exactly_once, step_connection
from .plan import SUSPENDING_KINDS, plan_calls
from .records import (
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
    ServerToolResult,
    ToolResult,
    TurnError,
    TurnSummary,
    WokenAnswers,
)
from .resolve import end_fields, resolve_call

__all__ = [
    "collect_answers",
    "commit_results",
    "finish_turn",
    "log_settled",
    "model_answer",
    "run_server_tool",
    "tool_result_message",
]

R = TypeVar("R")
P = ParamSpec("P")


#: How long a turn woken with an answer waits for that answer's commit to become visible.
ANSWER_VISIBILITY_MS = 10_000


def _retryable(exc: BaseException) -> bool:
    return (isinstance(exc, ProviderError) and exc.retryable) or is_transient(exc)


# -- the model ------------------------------------------------------------------------------


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
    # What is still buffered is written by the step's own commit (no transaction of its own).
    last_delta = deltas.take()
    plan = plan_calls(agent, response.tool_calls)
    model: dict[str, Any] = {"response": response.model_dump(mode="json"), "llm": agent.llm.name}
    final_summary: TurnSummary | None = None
    if not response.tool_calls:
        final_summary = {
            **summary,
            "steps": summary["steps"] + 1,
            "inputTokens": summary["inputTokens"] + response.usage.input_tokens,
            "outputTokens": summary["outputTokens"] + response.usage.output_tokens,
        }
    retention_ms = int(agent.completed_tombstone_retention * 1000)
    # The row as read before the model call: the commit swaps from it (no second read) and a
    # commit that finds it changed (a stop, a new message) reads it again, locked.
    prior = Prior(state)

    async def commit() -> ModelStepResult:
        committed = await _commit_model(
            session_id,
            root_session_id,
            run_id,
            step,
            model,
            plan,
            retention_ms,
            final_summary,
            last_delta,
            prior,
        )
        return {
            "response": model["response"],
            "llm": model["llm"],
            "plan": plan,
            "deadlines": committed["deadlines"],
        }

    try:
        committed = await commit_once(
            slot,
            session_id,
            run_id,
            step,
            commit,
            attempts=OWNERSHIP_ATTEMPTS,
            retry_event="client_tool.ownership_retry",
            failed_event="client_tool.ownership_write_failed",
            session_ids=list(dict.fromkeys([session_id, root_session_id])),
            read_first=False,  # read just above, before the model call
            lean=True,
        )
    except Fenced as fenced:
        # Stopped or superseded while the model ran: nothing is written, the answer dropped.
        return {FENCED: fenced.reason}
    except HelixError as exc:
        # The model ran (and spent tokens) but its answer could not be committed: the turn
        # fails with this error, and its summary still counts the call.
        raise with_details(exc, modelUsage=response.usage.model_dump()) from exc
    _log_model_commit(session_id, run_id, plan, committed["deadlines"], final_summary)
    return committed


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


def _pending_entries(
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
            args_digest=args_digest(item["toolName"], item["input"])
            if item["kind"] == "approval"
            else None,
        )
    return entries


def _start_events(plan: list[PlanItem], entries: dict[str, PendingCall]) -> list[dict[str, Any]]:
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
    prior: Prior | None = None,
) -> dict[str, Any]:
    """Commit the assistant message, its events and usage, and register suspending calls.

    In the same transaction, the suspending calls' pending entries are written on this
    (owning) session and their ownership entries on the root. With ``final_summary`` (a reply
    without tool calls) the same transaction also ends the turn ``completed``.

    Returns:
        ``{"deadlines": {toolCallId: deadlineAt}}`` for the calls the turn will park on.
    """
    ctx = current()
    conn = await step_connection()
    response = LLMResponse.model_validate(model["response"])
    at = now_ms()
    await ctx.store.append_messages(
        session_id,
        run_id,
        [Message(role="assistant", content=response.text, tool_calls=response.tool_calls)],
        conn,
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
        ],
        conn,
    )
    entries = _pending_entries(plan, run_id, at, retention_ms)

    def register(states: dict[str, SessionState]) -> None:
        # The fence: only the session's live run, still running, commits its model's answer.
        owner, root = states[session_id], states[root_session_id]
        guard(owner, run_id, ("running",))
        if final_summary is not None:
            _end("completed", None)({session_id: owner})
        elif not entries:
            raise NoChange(None)
        owner.pending.update(entries)
        if entries:
            owner.status = "suspended_client_tool"
        for tcid in entries:
            root.ownership[tcid] = session_id

    await ctx.store.update([session_id, root_session_id], register, conn=conn, prior=prior)
    new_events: list[dict[str, Any]] = [last_delta] if last_delta is not None else []
    if response.text:
        new_events.append(event("text", text=response.text, step=step))
    new_events.extend(_start_events(plan, entries))
    if entries:
        new_events.append(event("suspended", toolCallIds=list(entries), reason=_reason(entries)))
    if final_summary is not None:
        new_events.append(event("turn_end", outcome="completed", text=response.text))
        after_commit(lambda: approval_metrics.record_turn("completed"))
    await ctx.store.append_events(session_id, run_id, new_events, conn)
    # The hooks' events of the parked calls, in this transaction (``notes.py``).
    await notes.write(conn, notes.park_rows(session_id, root_session_id, plan, entries))
    return {"deadlines": {k: v.deadline_at for k, v in entries.items()}, "at": at}


def _reason(entries: dict[str, PendingCall]) -> str:
    """A suspension's ``reason``: ``approval`` when it waits on approvals only."""
    return "approval" if all(e.kind == "approval" for e in entries.values()) else "client_tool"


# -- tools ----------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    json.dumps(value)  # fail here, not in the checkpoint, on a non-JSON result
    return value


@DBOS.step(name=names.SERVER_TOOL_STEP)
async def run_server_tool(
    agent_type: str, tool_name: str, tool_input: dict[str, Any]
) -> ServerToolResult:
    """Run a server tool; a tool's own failure is a failed tool result, not a failed turn."""
    tool = current().registry.get(agent_type).tool(tool_name)
    if tool is None or tool.function is None:
        return {
            "ok": False,
            "error": f"Unknown server tool {tool_name!r}",
            "errorCode": "tool_execution_failed",
        }
    try:
        args = tool.input_model.model_validate(tool_input)
        value = tool.function(args)
        if inspect.isawaitable(value):
            value = await value
        return {"ok": True, "result": _jsonable(value)}
    except ValidationError as exc:
        return {
            "ok": False,
            "error": f"Invalid arguments: {exc.errors(include_url=False)}",
            "errorCode": "validation_failed",
        }
    except Exception as exc:  # the model reads the failure and may recover
        return {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "errorCode": "tool_execution_failed",
        }


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

    async def read(conn: Any) -> CollectedAnswers:
        state = await store.get(session_id, conn)
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


def _rebind(owner: SessionState, workflow_id: str, at: int) -> None:
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
    retry_event="client_tool.clear_pending_retry",
    failed_event="client_tool.clear_failed_exhausted",
    # Once committed, the run has moved on (its guard fails) or, for server tools only, the
    # tool results' unique index refuses a second copy: no read of the slot first.
    read_first=False,
    lean=True,
)
async def commit_results(
    session_id: str,
    root_session_id: str,
    run_id: str,
    next_run: str,
    plan: list[PlanItem],
    given: dict[str, ToolResult],
    woken: WokenAnswers | None = None,
    resumed: Resumption | None = None,
    workflow_id: str | None = None,
) -> CommittedResults:
    """Append one tool result per call in the model's order, and settle the suspending calls.

    ``given`` holds the results already known (server tools, sub-agents, resolved approvals);
    every other suspending call is resolved here, from its stored pending entry read in this
    transaction. In one transaction: the results (then a stashed new message, if one waits),
    the pending and ownership entries cleared, tombstones written on the root, wait and
    outcome metrics, ``tool_end`` events, and the session moved to the continuation run.

    Fenced: only the session's live run, still active, settles its calls; a stopped or
    superseded run writes nothing (``{"fenced": reason}``).

    ``resumed``: the session's rows and conversation as read when the turn woke (layout 2):
    the commit swaps from those rows (``store.Prior``), and is then one statement with no
    transaction around it; it hands the next model step its inputs (``Resumption``).

    ``workflow_id``: the workflow that continues a hibernated turn: the session's row names
    it from this commit on (its next batch's wake-ups go to it), and the hibernation mark is
    removed.

    Returns:
        ``{"results": [...]}`` in the model's order (recorded, so a replay reads the same).
    """
    ctx = current()
    conn = await step_connection()
    at = now_ms()
    suspending = [item for item in plan if item["kind"] in SUSPENDING_KINDS]
    ids = [item["toolCallId"] for item in suspending]

    def settle(states: dict[str, SessionState]) -> tuple[list[ToolResult], EntryStash | None]:
        owner, root = states[session_id], states[root_session_id]
        guard(owner, run_id, ACTIVE_STATUSES)
        await_visible(owner, woken or {}, at)
        stash: EntryStash | None = owner.metadata.pop(STASH_KEY, None)
        abandon = bool(stash and stash.get("abandonPending"))
        _forget_child_ends(owner, plan)
        resolved = dict(given)
        for item in suspending:
            tcid = item["toolCallId"]
            entry = owner.pending.pop(tcid, None)
            if tcid not in resolved:
                current_entry = (
                    entry.dump() if entry is not None and entry.run_id == run_id else None
                )
                resolved[tcid] = resolve_call(item, current_entry, abandon)
            root.ownership.pop(tcid, None)
            root.completed[tcid] = Tombstone(
                completed_at=at,
                outcome=resolved[tcid]["outcome"],
                run_id=run_id,
                owner_session_id=session_id,
                retention_ms=entry.completed_retention_ms if entry else 0,
            )
        _reap_tombstones(root, at, keep=set(ids))
        owner.status = "running"
        owner.run_id = next_run
        if workflow_id is not None:
            _rebind(owner, workflow_id, at)
        return [resolved[item["toolCallId"]] for item in plan], stash

    saved: SessionState | None = None
    if suspending:
        committed, (results, stash) = await ctx.store.update(
            [session_id, root_session_id],
            settle,
            conn=conn,
            prior=resumed.prior if resumed is not None else None,
        )
        saved = committed[session_id]
    else:

        def fence(states: dict[str, SessionState]) -> None:
            owner = states[session_id]
            guard(owner, run_id, ACTIVE_STATUSES)
            if workflow_id is None and CHILD_ENDS_KEY not in owner.metadata:
                raise NoChange(None)
            # A turn continued after it waited on its sub-agent: the row names its workflow.
            _forget_child_ends(owner, plan)
            if workflow_id is not None:
                _rebind(owner, workflow_id, at)

        await ctx.store.update([session_id], fence, conn=conn)
        results, stash = [given[item["toolCallId"]] for item in plan], None
    suspended = [r for r in results if r.get("suspended")]
    new_messages = [tool_result_message(r) for r in results]
    if stash and stash.get("message"):
        # The message is the continuation run's own input (a retry of that run finds it).
        new_messages.append(
            mark_entry_input(Message(role="user", content=stash["message"]), next_run)
        )
    await ctx.store.append_messages(session_id, run_id, new_messages, conn)
    usage_rows: list[dict[str, Any]] = []
    for r in suspended:
        common: dict[str, Any] = {
            "session_id": session_id,
            "run_id": run_id,
            "tool_call_id": r["toolCallId"],
            "tool_name": r["toolName"],
            "at_ms": at,
        }
        usage_rows.append(metrics.wait_row(wait_ms=r.get("waitMs", 0), **common))
        if r["outcome"] == "timeout":
            usage_rows.append(metrics.counter_row(metrics.CLIENT_TOOL_TIMEOUT, **common))
    await ctx.store.record_usage(usage_rows, conn)
    await notes.write(
        conn, notes.settle_rows(session_id, root_session_id, run_id, plan, suspended, at)
    )
    after_commit(lambda: approval_metrics.record_results(suspended))
    end_events = []
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
        end_events.append(event("tool_end", **data))
    if stash and stash.get("message"):
        end_events.append(event("user_message", text=stash["message"]))
    await ctx.store.append_events(session_id, run_id, end_events, conn)
    out: CommittedResults = {
        "results": results,
        "stashedMessage": bool(stash and stash.get("message")),
    }
    if resumed is not None and saved is not None:
        resumed.offer(out, saved, new_messages)
    return out


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


def _end(status: str, error: TurnError | None) -> Callable[[dict[str, SessionState]], None]:
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
@exactly_once(names.FINISH_STEP, "finish", read_first=False, lean=True)
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
    conn = await step_connection()
    status = "completed" if outcome == "completed" else "failed"
    end = _end(status, error)
    root_id = root_session_id or session_id
    at = now_ms()

    def finish(states: dict[str, SessionState]) -> list[PendingCall]:
        owner, root = states[session_id], states[root_id]
        guard(owner, run_id, ACTIVE_STATUSES)
        cleared = stop_pending(owner, root, at)
        end({session_id: owner})
        return cleared

    _, cleared = await ctx.store.update([session_id, root_id], finish, conn=conn)
    await notes.write(conn, notes.stop_rows(root_id, [(session_id, e) for e in cleared], at))
    await ctx.store.append_events(
        session_id,
        run_id,
        [event("turn_end", outcome=outcome, text=text, **({"error": error} if error else {}))],
        conn,
    )
    after_commit(lambda: approval_metrics.record_turn(outcome))
    return {"outcome": outcome, "summary": summary}
