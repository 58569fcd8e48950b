"""The Tasks extension's state machine over our sessions (docs/mcp.md).

The session tables are the task store: a task is a turn, its id names the session and the
run the turn started in (``<session>/<run>``), and every answer is read from the session's
row through ``AgentRuntime.status``, so any process of a fleet answers for any task, after
restarts and hibernation alike. ``tasks/update`` is our submit, ``tasks/cancel`` our
interrupt. The SDK has no Tasks implementation (no task store, no ``tasks/*`` types): the
wire shapes below are the extension's (``io.modelcontextprotocol/tasks``, 2026-07-28).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

import mcp_types as types
from pydantic import ConfigDict, Field, model_validator

from ..core.approval_policy import Decider
from ..core.clock import now_ms
from ..runtime import AgentRuntime

__all__ = [
    "APPROVAL_SCHEMA",
    "TASKS_EXTENSION",
    "TaskParams",
    "TaskUpdateParams",
    "input_requests",
    "QUORUM_META_KEY",
    "parse_task_id",
    "request_key",
    "submit_answers",
    "task_body",
    "task_id",
    "task_status",
    "wants_tasks",
]

#: The extension's identifier, advertised in ``server/discover`` and declared by clients.
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: Milliseconds a client is asked to wait between two ``tasks/get``.
POLL_INTERVAL_MS = 1000
#: The form an approval asks for: the decision, and a reason for a denial.
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "Run the call with these arguments"},
        "reason": {"type": "string", "description": "Why not (read by the agent's model)"},
    },
    "required": ["approved"],
}

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]


class TaskParams(types.RequestParams):
    """``tasks/get`` and ``tasks/cancel``: the task named. One spelling per field (the
    extension's camelCase; ``task_id`` is refused) and no undocumented name, as every body
    our routes accept."""

    model_config = ConfigDict(populate_by_name=False)

    task_id: str = Field(max_length=1024)

    @model_validator(mode="before")
    @classmethod
    def _documented_names_only(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = {field.alias or name for name, field in cls.model_fields.items()}
            unknown = sorted(set(data) - known)
            if unknown:
                raise ValueError(f"unknown fields: {', '.join(unknown)}")
        return data


class TaskUpdateParams(TaskParams):
    """``tasks/update``: answers to the task's ``inputRequests``, by their keys."""

    input_responses: dict[str, dict[str, Any]] = Field(default_factory=dict)


def wants_tasks(meta: types.RequestParamsMeta | None) -> bool:
    """Whether a request declares the Tasks extension in its client capabilities."""
    capabilities = (meta or {}).get("io.modelcontextprotocol/clientCapabilities") or {}
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def task_id(session_id: str, run_id: str, created_ms: int) -> str:
    """A task's id: the session, the run its turn started in, and when (epoch ms; the row
    keeps no creation time, and any process must answer the same ``createdAt``)."""
    return f"{session_id}/{run_id}/{created_ms}"


def parse_task_id(value: str) -> tuple[str, str, int] | None:
    """``(session, run, created ms)`` of a task id; ``None`` for an id not one of ours."""
    head, _, created = value.rpartition("/")
    session_id, _, run_id = head.partition("/")
    if not (session_id and run_id and created.isdigit()):
        return None
    return session_id, run_id, int(created)


def task_status(view: dict[str, Any]) -> TaskStatus:
    """The task's status from the session's status view."""
    status = view["status"]
    if status == "completed":
        return "completed"
    if status == "failed":
        return "failed"
    if status == "interrupted":
        return "cancelled"
    if status == "suspended_client_tool" and view["waitingFor"]:
        return "input_required"
    return "working"


def _iso(ms: int) -> str:
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return at.isoformat().replace("+00:00", "Z")


def task_body(tid: str, view: dict[str, Any], created_ms: int) -> dict[str, Any]:
    """The task's fields (``CreateTaskResult`` and the first part of a ``tasks/get``)."""
    status = task_status(view)
    body: dict[str, Any] = {
        "taskId": tid,
        "status": status,
        "createdAt": _iso(created_ms),
        "lastUpdatedAt": _iso(now_ms()),
        "ttl": None,  # kept as long as the session is: the session tables are the store
        "pollInterval": POLL_INTERVAL_MS,
    }
    if status == "failed" and view.get("error"):
        body["statusMessage"] = str(view["error"].get("message", ""))
    return body


#: The ``_meta`` key of an approval's quorum progress in its elicitation request.
QUORUM_META_KEY = "io.helix-dbos/quorum"


def request_key(call: dict[str, Any]) -> str:
    """The ``inputRequests`` key of a pending call: its id, and for a server tool's later
    round of questions ``<id>#<round>`` (a key names one question for the task's life)."""
    shown = call["input"] if isinstance(call["input"], dict) else {}
    round_ = shown.get("round") if "inputRequests" in shown else None
    return (
        f"{call['toolCallId']}#{round_}"
        if isinstance(round_, int) and round_ > 1
        else call["toolCallId"]
    )


async def input_requests(rt: AgentRuntime, view: dict[str, Any]) -> dict[str, Any]:
    """Each unanswered call of the parked turn as an elicitation form, under its key
    (``request_key``): an approval asks for a decision (with its quorum's progress when it
    needs several approvers), a client call for the tool's output, a server tool that asked
    (``runtime/asks.py``) its own form."""
    found: dict[str, Any] = {}
    for call in view["pendingToolCalls"]:
        if "submittedAt" in call:
            continue
        asked = _asked(call)
        if asked is not None:  # a server tool's own form (an MCP tool's input_required)
            found[request_key(call)] = asked
            continue
        meta: dict[str, Any] | None = None
        if call["kind"] == "approval":
            message = f"Approve {call['toolName']} with {json.dumps(call['input'])}?"
            schema = APPROVAL_SCHEMA
            quorum = await _quorum(rt, call)
            if quorum is not None:
                message += f" ({quorum['text']} approvals)"
                meta = {QUORUM_META_KEY: quorum}
        else:
            message = f"{call['toolName']} {json.dumps(call['input'])}"
            schema = await _output_schema(rt, call["ownerSessionId"], call["toolName"])
        params = types.ElicitRequestFormParams(message=message, requested_schema=schema)
        if meta is not None:
            params = params.model_copy(update={"meta": meta})
        request = types.ElicitRequest(params=params)
        found[request_key(call)] = request.model_dump(mode="json", by_alias=True, exclude_none=True)
    return found


async def _quorum(rt: AgentRuntime, call: dict[str, Any]) -> dict[str, Any] | None:
    """An approval's quorum progress, ``{approvals, needed, approvers, text ("1 of 2")}``
    as the inbox shows it; ``None`` for an approval one approver decides."""
    state = await rt.session(call["ownerSessionId"])
    entry = state.pending.get(call["toolCallId"])
    policy = entry.policy if entry is not None else None
    if not policy or int(policy.get("quorum", 1)) <= 1:
        return None
    votes = policy.get("votes") or []
    needed = int(policy["quorum"])
    return {
        "approvals": len(votes),
        "needed": needed,
        "approvers": [v.get("principal") for v in votes],
        "text": f"{len(votes)} of {needed}",
    }


def _asked(call: dict[str, Any]) -> dict[str, Any] | None:
    """The form of a call whose server tool asked one question (``runtime/asks.py``)."""
    shown = call["input"] if isinstance(call["input"], dict) else {}
    given = shown.get("inputRequests") if "arguments" in shown else None
    if not isinstance(given, dict) or len(given) != 1:
        return None
    return next(iter(given.values()))  # type: ignore[no-any-return]


def _confirmed(call: dict[str, Any], action: Any, content: dict[str, Any]) -> bool:
    """Whether the response to a server tool's confirmation (an approval) confirms: an
    accept whose one boolean field is true."""
    form = next(iter(call["input"]["inputRequests"].values()))
    fields = form["params"]["requestedSchema"]["properties"]
    return action == "accept" and content.get(next(iter(fields))) is True


async def _output_schema(rt: AgentRuntime, owner: str, tool_name: str) -> dict[str, Any]:
    state = await rt.session(owner)
    tool = (
        rt.registry.get(state.agent_type).tool(tool_name)
        if state.agent_type in rt.registry
        else None
    )
    if tool is None or tool.output_model is None:
        return {"type": "object", "properties": {}}
    return tool.output_model.model_json_schema()


async def submit_answers(
    rt: AgentRuntime,
    session_id: str,
    view: dict[str, Any],
    responses: dict[str, dict[str, Any]],
    decider: Decider | None = None,
) -> dict[str, str]:
    """Submit each answer through the ordinary submit (fencing, idempotency, size limits,
    validation); an answer to no pending call of the task is refused by the submit itself,
    and one to a server tool's earlier round of questions answers ``already_completed``.
    ``decider``: who answers, as the request's authentication established it (an approval's
    decider, counted by a quorum and recorded). Returns each key's submit status.

    Raises:
        HelixError: what the submit refused (an invalid result, a forged approval, ...).
    """
    calls = {request_key(c): c for c in view["pendingToolCalls"]}
    answered: dict[str, str] = {}
    for key, response in responses.items():
        call = calls.get(key)
        tcid = call["toolCallId"] if call is not None else key.partition("#")[0]
        if call is None and any(c["toolCallId"] == tcid for c in calls.values()):
            answered[key] = "already_completed"  # a round of questions already answered
            continue
        answer = await _submit_one(rt, session_id, tcid, call, response, decider)
        answered[key] = answer.status
    return answered


async def _submit_one(
    rt: AgentRuntime,
    session_id: str,
    tcid: str,
    call: dict[str, Any] | None,
    response: dict[str, Any],
    decider: Decider | None,
) -> Any:
    """One answer as the submit it is: an approval's decision, a server tool's response as
    is, a client tool's content (an accept) or error (a decline or cancel)."""
    action = response.get("action")
    content = response.get("content") or {}
    if call is not None and call["kind"] == "approval":
        if _asked(call) is not None:  # a server tool's confirmation
            approved = _confirmed(call, action, content)
            reason = None if approved else f"the user chose {action}"
        else:
            approved = action == "accept" and content.get("approved", True) is True
            reason = content.get("reason") or (None if approved else f"the user chose {action}")
        return await rt.submit_tool_result(
            session_id,
            tcid,
            kind="approval-response",
            approval_id=call.get("approvalId"),
            approved=approved,
            reason=reason,
            decider=decider,
        )
    if call is not None and _asked(call) is not None:  # the tool takes the response
        return await rt.submit_tool_result(session_id, tcid, result=response, decider=decider)
    if action == "accept":
        return await rt.submit_tool_result(session_id, tcid, result=content, decider=decider)
    return await rt.submit_tool_result(
        session_id, tcid, error=f"the user chose {action}", decider=decider
    )
