"""The durable steps of a turn: the model call with the commit of its answer, server tools,
reading a batch's answers, committing its results, and the turn's end.

Every step that writes session state is exactly-once (see ``once.py``).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from dbos import DBOS
from pydantic import BaseModel, ValidationError

from ..core.events import event
from ..core.humanize import humanize_client_tool_error
from ..core.llm import LLMRequest, LLMResponse
from ..core.messages import Message
from ..core.session import PendingCall, SessionState, Tombstone, args_digest
from ..errors import HelixError, ProviderError
from ..observability import metrics
from ..observability.log import log_event
from ..store.store import OWNERSHIP_ATTEMPTS, PENDING_CLEAR_ATTEMPTS, now_ms
from . import names
from .context import current
from .deltas import DeltaStream
from .once import commit_once, exactly_once, marker, recorded, step_connection
from .plan import SUSPENDING_KINDS, plan_calls
from .resolve import resolve_call

__all__ = [
    "collect_answers",
    "commit_results",
    "finish_turn",
    "model_step",
    "run_server_tool",
    "tool_result_message",
]

R = TypeVar("R")
P = ParamSpec("P")


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, ProviderError) and exc.retryable


# -- the model ------------------------------------------------------------------------------


@DBOS.step(
    name=names.MODEL_STEP,
    retries_allowed=True,
    max_attempts=4,
    interval_seconds=0.5,
    backoff_rate=2.0,
    should_retry=_retryable,
)
async def model_step(
    session_id: str,
    root_session_id: str,
    run_id: str,
    agent_type: str,
    step: int,
    summary: dict[str, Any],
) -> dict[str, Any]:
    """Call the model on the session's conversation and commit its answer, exactly once.

    The commit (see ``_commit_model``) appends the assistant message and registers the
    suspending calls. A re-execution after the commit returns the committed answer: the
    provider is called again only when nothing was committed.

    Returns:
        ``{"response", "llm", "plan", "deadlines"}``.
    """
    slot = marker("model")
    done = await recorded(slot)
    if done is not None:
        return done["state"]["result"]  # type: ignore[no-any-return]
    ctx = current()
    agent = ctx.registry.get(agent_type)
    history = await ctx.store.load_messages(session_id)
    request = LLMRequest(
        instructions=agent.instructions,
        messages=history,
        tools=[tool.schema() for tool in agent.tools],
        session_id=session_id,
        run_id=run_id,
        step=step,
    )
    deltas = DeltaStream(ctx.store, session_id, run_id, step)
    response = await agent.llm.complete(request, on_text=deltas)
    await deltas.flush()
    plan = plan_calls(agent, response.tool_calls)
    model = {"response": response.model_dump(mode="json"), "llm": agent.llm.name}
    final_summary = None
    if not response.tool_calls:
        final_summary = {
            **summary,
            "steps": summary["steps"] + 1,
            "inputTokens": summary["inputTokens"] + response.usage.input_tokens,
            "outputTokens": summary["outputTokens"] + response.usage.output_tokens,
        }
    retention_ms = int(agent.completed_tombstone_retention * 1000)

    async def commit() -> dict[str, Any]:
        committed = await _commit_model(
            session_id, root_session_id, run_id, step, model, plan, retention_ms, final_summary
        )
        return {**model, "plan": plan, "deadlines": committed["deadlines"]}

    try:
        return await commit_once(slot, session_id, run_id, step, commit)
    except HelixError as exc:
        # The model ran (and spent tokens) but its answer could not be committed: the turn
        # fails with this error, and its summary still counts the call.
        exc.details["modelUsage"] = response.usage.model_dump()
        raise


# -- committing the model's answer ----------------------------------------------------------


def _pending_entries(
    plan: list[dict[str, Any]], run_id: str, at_ms: int, retention_ms: int
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
            args_digest=args_digest(item["toolName"], item["input"])
            if item["kind"] == "approval"
            else None,
        )
    return entries


def _start_events(
    plan: list[dict[str, Any]], entries: dict[str, PendingCall]
) -> list[dict[str, Any]]:
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
    plan: list[dict[str, Any]],
    retention_ms: int,
    final_summary: dict[str, Any] | None = None,
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
    if entries:

        def register(states: dict[str, SessionState]) -> None:
            owner, root = states[session_id], states[root_session_id]
            owner.pending.update(entries)
            owner.status = "suspended_client_tool"
            for tcid in entries:
                root.ownership[tcid] = session_id

        await ctx.store.update(
            [session_id, root_session_id],
            register,
            attempts=OWNERSHIP_ATTEMPTS,
            conn=conn,
            retry_event="client_tool.ownership_retry",
            failed_event="client_tool.ownership_write_failed",
        )
    if final_summary is not None:
        await ctx.store.update([session_id], _end("completed", None), conn=conn)
    new_events: list[dict[str, Any]] = []
    if response.text:
        new_events.append(event("text", text=response.text, step=step))
    new_events.extend(_start_events(plan, entries))
    if entries:
        new_events.append(event("suspended", toolCallIds=list(entries), reason=_reason(entries)))
    if final_summary is not None:
        new_events.append(event("turn_end", outcome="completed", text=response.text))
    await ctx.store.append_events(session_id, run_id, new_events, conn)
    if final_summary is not None:
        log_event(
            "turn.summary", sessionId=session_id, runId=run_id, outcome="completed", **final_summary
        )
    for entry in entries.values():
        log_event(
            "client_tool.suspended",
            sessionId=session_id,
            runId=run_id,
            toolCallId=entry.tool_call_id,
            toolName=entry.tool_name,
            deadlineAt=entry.deadline_at,
            kind=entry.kind,
        )
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
) -> dict[str, Any]:
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
async def collect_answers(session_id: str, run_id: str, tool_call_ids: list[str]) -> dict[str, Any]:
    """Read the stored answers of a batch (and whether a new message abandons the rest)."""
    state = await current().store.get(session_id)
    stash = state.metadata.get("entryInput")
    abandon = bool(stash and stash.get("abandonPending"))
    answers: dict[str, Any] = {}
    for tcid in tool_call_ids:
        entry = state.pending.get(tcid)
        answers[tcid] = entry.dump() if entry is not None and entry.run_id == run_id else None
    return {"answers": answers, "abandon": abandon}


def tool_result_message(result: dict[str, Any]) -> Message:
    """The tool message the model reads for one call's outcome."""
    if result.get("ok"):
        value = result.get("result")
        return Message(
            role="tool",
            tool_call_id=result["toolCallId"],
            tool_name=result["toolName"],
            content=json.dumps(value),
            result=value,
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
    )


@exactly_once(names.COMMIT_RESULTS_STEP, "results", run_arg=2)
async def commit_results(
    session_id: str,
    root_session_id: str,
    run_id: str,
    next_run: str,
    plan: list[dict[str, Any]],
    given: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Append one tool result per call in the model's order, and settle the suspending calls.

    ``given`` holds the results already known (server tools, sub-agents, resolved approvals);
    every other suspending call is resolved here, from its stored pending entry read in this
    transaction. In one transaction: the results (then a stashed new message, if one waits),
    the pending and ownership entries cleared, tombstones written on the root, wait and
    outcome metrics, ``tool_end`` events, and the session moved to the continuation run.

    Returns:
        ``{"results": [...]}`` in the model's order (recorded, so a replay reads the same).
    """
    ctx = current()
    conn = await step_connection()
    at = now_ms()
    suspending = [item for item in plan if item["kind"] in SUSPENDING_KINDS]
    ids = [item["toolCallId"] for item in suspending]

    def settle(states: dict[str, SessionState]) -> tuple[list[dict[str, Any]], Any]:
        owner, root = states[session_id], states[root_session_id]
        stash = owner.metadata.pop("entryInput", None)
        abandon = bool(stash and stash.get("abandonPending"))
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
        return [resolved[item["toolCallId"]] for item in plan], stash

    if suspending:
        _, (results, stash) = await ctx.store.update(
            [session_id, root_session_id],
            settle,
            attempts=PENDING_CLEAR_ATTEMPTS,
            conn=conn,
            retry_event="client_tool.clear_pending_retry",
            failed_event="client_tool.clear_failed_exhausted",
        )
    else:
        results, stash = [given[item["toolCallId"]] for item in plan], None
    suspended = [r for r in results if r.get("suspended")]
    new_messages = [tool_result_message(r) for r in results]
    if stash and stash.get("message"):
        new_messages.append(Message(role="user", content=stash["message"]))
    await ctx.store.append_messages(session_id, run_id, new_messages, conn)
    usage_rows: list[dict[str, Any]] = []
    for r in suspended:
        common = {
            "session_id": session_id,
            "run_id": run_id,
            "tool_call_id": r["toolCallId"],
            "tool_name": r["toolName"],
            "at_ms": at,
        }
        usage_rows.append(metrics.wait_row(wait_ms=r.get("waitMs", 0), **common))
        if r["outcome"] == "timeout":
            usage_rows.append(metrics.counter_row(metrics.CLIENT_TOOL_TIMEOUT, **common))
            log_event(
                "client_tool.timeout",
                sessionId=session_id,
                runId=run_id,
                toolCallId=r["toolCallId"],
                toolName=r["toolName"],
                deadlineAt=r.get("deadlineAt"),
            )
    await ctx.store.record_usage(usage_rows, conn)
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
        end_events.append(event("tool_end", **data))
    if stash and stash.get("message"):
        end_events.append(event("user_message", text=stash["message"]))
    await ctx.store.append_events(session_id, run_id, end_events, conn)
    return {"results": results, "stashedMessage": bool(stash and stash.get("message"))}


def _reap_tombstones(root: SessionState, at: int, keep: set[str]) -> None:
    # Markers are reaped on the next marker write; retention 0 means "reap at the next write".
    for tcid in [
        k
        for k, t in root.completed.items()
        if k not in keep and t.completed_at + t.retention_ms <= at
    ]:
        del root.completed[tcid]


# -- the end of a turn ----------------------------------------------------------------------


def _end(status: str, error: dict[str, Any] | None) -> Callable[[dict[str, SessionState]], None]:
    """A mutation that ends a session's turn with ``status``."""

    def end(states: dict[str, SessionState]) -> None:
        for state in states.values():
            state.status = status  # type: ignore[assignment]
            state.error = error
            state.metadata.pop("entryInput", None)

    return end


@exactly_once(names.FINISH_STEP, "finish", run_arg=1)
async def finish_turn(
    session_id: str,
    run_id: str,
    outcome: str,
    text: str,
    error: dict[str, Any] | None,
    summary: dict[str, Any],
) -> None:
    """Record the turn's end: status, error, the ``turn_end`` event and the summary line."""
    ctx = current()
    conn = await step_connection()
    status = "completed" if outcome == "completed" else "failed"
    await ctx.store.update(
        [session_id], _end(status, error), attempts=PENDING_CLEAR_ATTEMPTS, conn=conn
    )
    await ctx.store.append_events(
        session_id,
        run_id,
        [event("turn_end", outcome=outcome, text=text, **({"error": error} if error else {}))],
        conn,
    )
    log_event("turn.summary", sessionId=session_id, runId=run_id, outcome=outcome, **summary)
