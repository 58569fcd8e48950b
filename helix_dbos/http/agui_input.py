"""Reading an AG-UI ``RunAgentInput``: what it answers, what it asks, what the client holds.

The server is the authority: the client's history is never written into the session. From an
input only these are read:

* ``tools``: the client's frontend tools, checked against the agent's own client tools;
* ``tool`` messages answering a call the thread waits on: client results (or errors);
* ``resume`` entries: approval decisions, by interrupt id (our approval id);
* the last message, when it is a user message: the text of a new turn.

Everything else (earlier history, ``context``, ``forwardedProps``) is ignored. Nothing here
stores anything; the endpoint (``agui.py``) submits what this module reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from ag_ui.core import (
    AssistantMessage,
    Message,
    ResumeEntry,
    RunAgentInput,
    TextPart,
    Tool,
    ToolMessage,
    UserMessage,
)

from ..core.agents import Agent
from ..core.session import args_digest
from ..errors import ApprovalMismatchError, RequestValidationError
from ..runtime import Submission
from .agui_events import Known
from .body import REQUEST_INVALID_MESSAGE
from .schemas import Identifier

__all__ = [
    "AguiRunInput",
    "client_tools",
    "known_of",
    "resume_answers",
    "tool_answers",
    "user_text",
]


class AguiRunInput(RunAgentInput):
    """AG-UI's ``RunAgentInput``; its ``threadId`` is the session id, so it follows the id rule
    of every id (``schemas.Identifier``). Validated under its documented (camelCase) names only:
    ag-ui's models also take the Python names (``thread_id``), which the pipeline refuses."""

    session_field: ClassVar[str] = "thread_id"

    thread_id: Identifier


def _invalid(cause: str, **details: Any) -> RequestValidationError:
    return RequestValidationError(REQUEST_INVALID_MESSAGE, cause=cause, **details)


def _parameters(schema: Any) -> tuple[frozenset[str], frozenset[str]] | None:
    """A JSON schema's top-level property names and required names; ``None`` without any."""
    if not isinstance(schema, Mapping) or not isinstance(schema.get("properties"), Mapping):
        return None
    required = schema.get("required")
    names = frozenset(str(n) for n in schema["properties"])
    return names, frozenset(str(n) for n in required) if isinstance(required, list) else frozenset()


def client_tools(agent: Agent) -> list[Tool]:
    """The agent's client tools (``execute="client"``) as AG-UI tool definitions: what a client
    declares as its frontend tools."""
    return [
        Tool(
            name=tool.name,
            description=tool.description,
            parameters=tool.input_model.model_json_schema(),
        )
        for tool in agent.tools
        if tool.execution == "client"
    ]


def check_client_tools(agent: Agent, declared: Sequence[Tool]) -> None:
    """Refuse a declared frontend tool that is not one of the agent's client tools, or whose
    parameters name other properties (or other required ones) than the tool's input schema.

    Raises:
        RequestValidationError: ``cause`` ``client_tool_unknown`` or ``client_tool_mismatch``
            (``toolName``; ``reason``: ``not_a_client_tool`` or ``parameters``).
    """
    for item in declared:
        tool = agent.tool(item.name)
        if tool is None:
            raise _invalid("client_tool_unknown", toolName=item.name)
        if tool.execution != "client":
            raise _invalid("client_tool_mismatch", toolName=item.name, reason="not_a_client_tool")
        theirs = _parameters(item.parameters)
        if theirs is not None and theirs != _parameters(tool.input_model.model_json_schema()):
            raise _invalid("client_tool_mismatch", toolName=item.name, reason="parameters")


def known_of(messages: Iterable[Message]) -> Known:
    """The message ids, tool calls and answered calls the client's messages hold."""
    ids: list[str] = []
    calls: list[str] = []
    answered: list[str] = []
    for message in messages:
        ids.append(message.id)
        if isinstance(message, AssistantMessage):
            calls += [call.id for call in message.tool_calls or []]
        elif isinstance(message, ToolMessage):
            answered.append(message.tool_call_id)
    return Known(ids, calls, answered)


def _text(content: Any, cause: str) -> str:
    if isinstance(content, str):
        return content
    if all(isinstance(part, TextPart) for part in content):
        return "".join(part.text for part in content)
    raise _invalid(cause)  # media parts: nothing a tool result or a turn can carry


def user_text(messages: Sequence[Message]) -> str | None:
    """The text of the last message when it is a user message (``None`` otherwise).

    Raises:
        RequestValidationError: ``cause: message``: it holds no text, or media parts.
    """
    last = messages[-1] if messages else None
    if not isinstance(last, UserMessage):
        return None
    text = _text(last.content, "message")
    if not text.strip():
        raise _invalid("message")
    return text


def _output(message: ToolMessage) -> Any:
    # A tool message carries text; a frontend tool returning data serialises it as JSON.
    text = _text(message.content, "tool_content")
    try:
        return json.loads(text)
    except ValueError:
        return text


def tool_answers(
    thread_id: str, messages: Iterable[Message], view: Mapping[str, Any] | None
) -> list[Submission]:
    """The client results among ``messages``: its ``tool`` messages for client calls the
    thread waits on with no answer yet, as submits. Tool messages for anything else (earlier
    history, answered calls, approvals, invented ids) are ignored."""
    waiting = {
        call["toolCallId"]: call
        for call in (view or {}).get("pendingToolCalls", [])
        if call.get("kind") == "client" and call.get("submittedAt") is None
    }
    out: list[Submission] = []
    seen: set[str] = set()
    for message in messages:
        if not isinstance(message, ToolMessage) or message.tool_call_id not in waiting:
            continue
        if message.tool_call_id in seen:
            raise _invalid("tool_message_repeated", toolCallId=message.tool_call_id)
        seen.add(message.tool_call_id)
        if message.error is not None:
            out.append(
                Submission(
                    thread_id, message.tool_call_id, "client-tool-result", error=message.error
                )
            )
        else:
            out.append(
                Submission(
                    thread_id, message.tool_call_id, "client-tool-result", result=_output(message)
                )
            )
    return out


def _decision(entry: ResumeEntry, call: Mapping[str, Any] | None) -> dict[str, Any]:
    """``approved``, ``reason``, ``edited_input`` of one resume entry.

    ``cancelled`` denies (with ``payload.reason`` when given); ``resolved`` carries
    ``{approved, reason?, editedArgs?, argsDigest?}``.
    """
    payload = entry.payload
    if entry.status == "cancelled":
        reason = payload.get("reason") if isinstance(payload, Mapping) else None
        return {"approved": False, "reason": reason if isinstance(reason, str) else None}
    if not isinstance(payload, Mapping) or not isinstance(payload.get("approved"), bool):
        raise _invalid("resume_payload", interruptId=entry.interrupt_id)
    reason, edited, digest = (
        payload.get("reason"),
        payload.get("editedArgs"),
        payload.get("argsDigest"),
    )
    if (
        not isinstance(reason, str | None)
        or not isinstance(edited, dict | None)
        or not isinstance(digest, str | None)
    ):
        raise _invalid("resume_payload", interruptId=entry.interrupt_id)
    if (
        digest is not None
        and call is not None
        and digest != args_digest(call["toolName"], call.get("input"))
    ):
        raise ApprovalMismatchError(
            "The approval was given for other arguments than the call's",
            toolCallId=call["toolCallId"],
        )
    return {"approved": payload["approved"], "reason": reason, "edited_input": edited}


def resume_answers(
    thread_id: str, entries: Sequence[ResumeEntry], view: Mapping[str, Any] | None
) -> tuple[list[Submission], list[Submission]]:
    """The approval decisions of ``resume``: ``(live, stale)``.

    Live ones answer an approval the thread waits on; stale ones name anything else (an
    answered approval, one of a stopped or ended run, an unknown id). Submitting a stale one
    stores nothing: its answer says why it is refused.

    Raises:
        RequestValidationError: a payload that is not a decision, or one interrupt twice.
        ApprovalMismatchError: ``argsDigest`` is not the call's.
    """
    calls = {
        call["approvalId"]: call
        for call in (view or {}).get("pendingToolCalls", [])
        if call.get("approvalId")
    }
    live: list[Submission] = []
    stale: list[Submission] = []
    seen: set[str] = set()
    for entry in entries:
        if entry.interrupt_id in seen:
            raise _invalid("resume_repeated", interruptId=entry.interrupt_id)
        seen.add(entry.interrupt_id)
        call = calls.get(entry.interrupt_id)
        # An approval id is ``<runId>::<toolCallId>``: a stale one still names its call.
        tool_call_id = call["toolCallId"] if call else entry.interrupt_id.rpartition("::")[2]
        sub = Submission(
            thread_id,
            tool_call_id,
            "approval-response",
            approval_id=entry.interrupt_id,
            **_decision(entry, call),
        )
        waiting = call is not None and call.get("submittedAt") is None
        (live if waiting else stale).append(sub)
    return live, stale
