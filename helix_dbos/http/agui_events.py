"""Translating a session's events into AG-UI 1.0 events (no I/O, no web framework).

``AguiRun`` holds one AG-UI run: it is fed the session's stored events in order and answers the
``ag-ui-protocol`` event models a ``HttpAgent`` (or CopilotKit) understands; ``encode`` frames
them as Server-Sent Events with the package's ``EventEncoder``. Text and steps go through the
AI SDK translation (``UIMessageStream``), so both endpoints cut a model's live text into
messages the same way; this module renames its parts into AG-UI's events:

* a run opens with ``RUN_STARTED`` (the request's ``threadId`` and ``runId``);
* the model's text is ``TEXT_MESSAGE_START`` / ``TEXT_MESSAGE_CONTENT`` / ``TEXT_MESSAGE_END``
  (``role: assistant``; the message id is ``text_<sequence>`` of its first event);
* ``tool_start`` and ``tool_approval_request`` are ``TOOL_CALL_START`` / ``TOOL_CALL_ARGS`` (the
  arguments as one JSON text) / ``TOOL_CALL_END``; ``metadata.kind`` says who runs the call
  (``client``, ``server``, ``subagent``, ``approval``);
* ``tool_end`` is ``TOOL_CALL_RESULT`` (``messageId`` ``result_<toolCallId>``): the output as
  JSON text, or the error text with ``metadata.errorCode``;
* ``tool_approval_counted`` (a quorum's progress) is ``CUSTOM`` ``helix.approval_quorum``;
* a server tool's questions (an MCP tool's ``input_required``, docs/mcp.md) follow its call
  as ``CUSTOM`` ``helix.input_request`` (``{toolCallId, toolName, deadlineAt, inputRequests}``),
  and a confirmation's interrupt says the tool's own message;
* the run ends with ``STATE_SNAPSHOT`` (the session's status under ``helix``) and one terminal
  event read from the session's status: ``RUN_FINISHED`` with the outcome ``success`` (with
  ``pendingToolCallIds`` when the turn waits on client calls), ``interrupt`` (the approvals it
  waits on) or ``cancelled`` (interrupted, or aborted); a failed turn is ``RUN_ERROR`` with its
  error code.

Calls and messages the client's own input already holds are not sent again (a reconnect of a
client that has them), and neither is the result of a call the client answered in this run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder

from ..core.clock import now_ms
from ..core.session import args_digest
from ..errors import ErrorCode
from .sse import unanswered_calls
from .ui_stream import Chunk, UIMessageStream, tool_error_code, tool_error_text

__all__ = [
    "APPROVAL_RESPONSE_SCHEMA",
    "AguiRun",
    "Known",
    "encode",
    "refusal",
    "waiting_calls",
]

#: The ``responseSchema`` of an approval interrupt: what a ``resume`` entry's payload carries.
APPROVAL_RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "reason": {"type": "string", "description": "Why; a denial's reason reaches the model."},
        "editedArgs": {
            "type": "object",
            "description": "Approve with these arguments instead (checked against the tool's "
            "input schema).",
        },
        "argsDigest": {
            "type": "string",
            "description": "The digest the human approved (metadata.argsDigest); another "
            "digest is refused (approval_mismatch).",
        },
    },
    "required": ["approved"],
}

_ENCODER = EventEncoder()


def encode(events: Iterable[BaseEvent]) -> bytes:
    """The events as SSE frames (``data: <event JSON>``), with the package's encoder."""
    return "".join(_ENCODER.encode(event) for event in events).encode()


class Known:
    """What the client's input already holds: message ids, tool calls, answered calls."""

    def __init__(
        self,
        message_ids: Iterable[str] = (),
        tool_call_ids: Iterable[str] = (),
        answered_tool_call_ids: Iterable[str] = (),
    ) -> None:
        self.message_ids = frozenset(message_ids)
        self.tool_call_ids = frozenset(tool_call_ids)
        self.answered_tool_call_ids = frozenset(answered_tool_call_ids)


def waiting_calls(view: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The calls a status view waits on: unanswered, their deadline ahead (as ``is_parked``)."""
    at = now_ms()
    return [c for c in unanswered_calls(dict(view)) if c["deadlineAt"] > at]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def interrupt_of(call: Mapping[str, Any]) -> Interrupt:
    """The AG-UI interrupt of a pending approval (a status view's pending call)."""
    name, args = call["toolName"], call.get("input")
    return Interrupt(
        id=call["approvalId"],
        reason="tool_call",
        message=_asked_message(args) or f"Approve the call of {name}?",
        tool_call_id=call["toolCallId"],
        response_schema=APPROVAL_RESPONSE_SCHEMA,
        expires_at=_iso(int(call["deadlineAt"])),
        metadata={
            "toolName": name,
            "args": args,
            "argsDigest": args_digest(name, args),
            "deadlineAt": call["deadlineAt"],
            "sessionId": call.get("ownerSessionId"),
        },
    )


def _asked_message(args: Any) -> str | None:
    """The message of a server tool's confirmation (docs/mcp.md), if ``args`` shows one."""
    asked = args.get("inputRequests") if isinstance(args, Mapping) else None
    if not isinstance(asked, Mapping) or len(asked) != 1:
        return None
    params = next(iter(asked.values())).get("params") or {}
    message = params.get("message")
    return message if isinstance(message, str) and message else None


def refusal(
    thread_id: str, run_id: str, code: str, message: str, details: Mapping[str, Any]
) -> list[BaseEvent]:
    """A run refused before anything was stored: ``RUN_STARTED``, then ``RUN_ERROR``."""
    # An error's details can hold values JSON cannot carry (as errors.py says): made text.
    metadata = json.loads(json.dumps(dict(details), default=str))
    return [
        _started(thread_id, run_id),
        RunErrorEvent(message=message, code=code, metadata=metadata),
    ]


def _started(thread_id: str, run_id: str) -> RunStartedEvent:
    return RunStartedEvent(thread_id=thread_id, run_id=run_id, protocol_version=PROTOCOL_VERSION)


class AguiRun:
    """The AG-UI events of one run, from the session events it is fed in order.

    Args:
        thread_id, run_id: the request's ids (echoed on the run's first and last event).
        known: what the client's input holds; it is not sent again.
    """

    def __init__(self, thread_id: str, run_id: str, known: Known | None = None) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.known = known or Known()
        self._ui = UIMessageStream(None)
        self._ui.start()  # AG-UI has no message-level start: the chunks are dropped
        self._kinds: dict[str, str] = {}
        self._quiet_texts: set[str] = set()
        self._ends: dict[str, Mapping[str, Any]] = {}
        self._calls: set[str] = set()

    @property
    def turn_stopped(self) -> bool:
        """Whether an event ended the turn's stream (``suspended`` or ``turn_end``)."""
        return self._ui.finished

    def started(self) -> list[BaseEvent]:
        """``RUN_STARTED``: the run's first event."""
        return [_started(self.thread_id, self.run_id)]

    def translate(self, event: Mapping[str, Any]) -> list[BaseEvent]:
        """The AG-UI events of one session event (``{type, data, sequence?}``)."""
        raw = event.get("data")
        data: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        kind = event.get("type")
        call_id = str(data.get("toolCallId", ""))
        if kind == "tool_start":
            self._kinds[call_id] = str(data.get("kind") or "server")
        elif kind == "tool_approval_request":
            self._kinds[call_id] = "approval"
        elif kind == "tool_end":
            self._ends[call_id] = data
        return self._events(self._ui.translate(event))

    def pending(self, view: Mapping[str, Any]) -> list[BaseEvent]:
        """The calls the session waits on that this run has not shown (a reconnect's replay,
        or a sub-agent's calls surfaced at the root)."""
        calls = waiting_calls(view)
        for call in calls:
            self._kinds.setdefault(call["toolCallId"], str(call.get("kind")))
        return self._events(self._ui.pending(calls))

    def finish(
        self,
        view: Mapping[str, Any],
        state: Any = None,
        *,
        observed: bool = True,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[BaseEvent]:
        """The run's last events, read from the session's status ``view``: the waiting calls
        not shown yet, open text closed, ``STATE_SNAPSHOT`` and the terminal event.

        ``state``: the input's state (a JSON object or nothing); the snapshot keeps its keys
        and adds ``helix``. ``observed=False``: the run only looked at the thread (a reconnect
        to an ended turn), so an ended turn is a plain success. ``metadata``: on the terminal
        event.
        """
        out: list[BaseEvent] = []
        if not self._ui.finished:
            out += self.pending(view)
            out += self._events(self._ui.finish("stop"))
        out += self._snapshot(view, state)
        out.append(self._terminal(view, observed, dict(metadata or {})))
        return out

    # -- the pieces ---------------------------------------------------------------------------

    def _snapshot(self, view: Mapping[str, Any], state: Any) -> list[BaseEvent]:
        if state is not None and not isinstance(state, dict):
            return []  # the client's own state is not an object: leave it alone
        helix = {
            "sessionId": view.get("sessionId", self.thread_id),
            "status": view.get("status"),
            "runId": view.get("runId"),
            "waitingFor": view.get("waitingFor", []),
            "pendingToolCalls": [
                {
                    k: c[k]
                    for k in ("toolCallId", "toolName", "kind", "deadlineAt", "approvalId")
                    if k in c
                }
                for c in waiting_calls(view)
            ],
        }
        return [StateSnapshotEvent(snapshot={**(state or {}), "helix": helix})]

    def _terminal(self, view: Mapping[str, Any], observed: bool, meta: dict[str, Any]) -> BaseEvent:
        """The run's terminal event: ``RUN_FINISHED`` with an interrupt (approvals waiting),
        pending calls (client tools waiting), a cancel or a success, or ``RUN_ERROR`` for a
        failed turn this run watched."""
        status = view.get("status")
        waiting = waiting_calls(view)
        base = {"thread_id": self.thread_id, "run_id": self.run_id, "metadata": meta or None}
        if waiting:
            return RunFinishedEvent(**base, outcome=_waiting_outcome(waiting))
        raw_error = view.get("error")
        error: Mapping[str, Any] = raw_error if isinstance(raw_error, Mapping) else {}
        stopped = status == "interrupted" or (
            status == "failed" and error.get("code") == ErrorCode.FRAMEWORK_CANCELLED
        )
        if observed and stopped:
            return RunFinishedEvent(**base, outcome=RunFinishedCancelledOutcome())
        if observed and status == "failed":
            return RunErrorEvent(
                message=str(error.get("message") or "The turn failed"),
                code=str(error.get("code") or ErrorCode.FRAMEWORK_INTERNAL_ERROR),
                metadata={"retryable": False, **meta},
            )
        return RunFinishedEvent(**base, outcome=RunFinishedSuccessOutcome())

    def _events(self, chunks: Iterable[Chunk]) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        for chunk in chunks:
            out += self._event_of(chunk)
        return out

    def _event_of(self, chunk: Chunk) -> list[BaseEvent]:
        kind = chunk["type"]
        if kind in ("text-start", "text-delta", "text-end"):
            return self._text(kind, chunk)
        if kind == "tool-input-available":
            return self._call(chunk)
        if kind in ("tool-output-available", "tool-output-denied", "tool-output-error"):
            return self._result(str(chunk["toolCallId"]))
        if kind == "data-approval-quorum":
            # A quorum's progress: AG-UI's CUSTOM event ``helix.approval_quorum``.
            return [CustomEvent(name="helix.approval_quorum", value=chunk["data"])]
        if kind == "data-input-request":
            # A server tool's questions and the call's deadline: ``helix.input_request``.
            return [CustomEvent(name="helix.input_request", value=chunk["data"])]
        # start/finish of steps and messages, approvals (interrupts come from the status),
        # error and abort (the terminal event comes from the status): nothing of their own.
        return []

    def _text(self, kind: str, chunk: Chunk) -> list[BaseEvent]:
        message_id = str(chunk["id"])
        if kind == "text-start" and message_id in self.known.message_ids:
            self._quiet_texts.add(message_id)
        if message_id in self._quiet_texts:
            return []
        if kind == "text-start":
            return [TextMessageStartEvent(message_id=message_id, role="assistant")]
        if kind == "text-delta":
            return [TextMessageContentEvent(message_id=message_id, delta=str(chunk["delta"]))]
        return [TextMessageEndEvent(message_id=message_id)]

    def _call(self, chunk: Chunk) -> list[BaseEvent]:
        call_id = str(chunk["toolCallId"])
        if call_id in self.known.tool_call_ids or call_id in self._calls:
            # Shown already: a server tool that then asked a person is one call (its
            # questions follow as ``helix.input_request``), not a second start.
            return []
        self._calls.add(call_id)
        meta = {"kind": self._kinds.get(call_id, "client")}
        return [
            ToolCallStartEvent(
                tool_call_id=call_id, tool_call_name=str(chunk["toolName"]), metadata=meta
            ),
            ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(chunk.get("input"))),
            ToolCallEndEvent(tool_call_id=call_id),
        ]

    def _result(self, call_id: str) -> list[BaseEvent]:
        data = self._ends.get(call_id, {})
        if call_id in self.known.answered_tool_call_ids:
            return []  # the client's own answer: it has the tool message already
        common = {"message_id": f"result_{call_id}", "tool_call_id": call_id, "role": "tool"}
        if "error" not in data:
            return [ToolCallResultEvent(**common, content=json.dumps(data.get("output")))]
        return [
            ToolCallResultEvent(
                **common,
                content=tool_error_text(data),
                metadata={"errorCode": tool_error_code(data) or "tool_error"},
            )
        ]


def _waiting_outcome(
    waiting: list[dict[str, Any]],
) -> RunFinishedInterruptOutcome | RunFinishedSuccessOutcome:
    """The outcome of a run that ends on ``waiting`` calls: an interrupt per approval when
    any call is an approval, else a success naming the client calls to answer."""
    approvals = [c for c in waiting if c.get("kind") == "approval"]
    if approvals:
        return RunFinishedInterruptOutcome(interrupts=[interrupt_of(c) for c in approvals])
    return RunFinishedSuccessOutcome(pending_tool_call_ids=[c["toolCallId"] for c in waiting])
