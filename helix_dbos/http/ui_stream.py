"""Translating a session's events into the Vercel AI SDK UI message stream (v1 wire).

Pure: no I/O, no web framework. ``UIMessageStream`` turns the stored events of one turn
(``turn_start``, ``text``, ``tool_start``, ``tool_approval_request``, ``suspended``,
``tool_end``, ``turn_end``) into the chunks a ``useChat`` client understands; ``encode_chunk``
frames one chunk as ``data: <json>\\n\\n`` and ``DONE`` ends a stream.

The mapping:

* the first chunk of a stream is ``start`` (with the message id) and ``start-step``;
* ``text_delta`` (the model's live text) opens a text part (``text-start``) at a step's first
  delta and is a ``text-delta``; the step's ``text`` then closes it (``text-end``, after the
  rest of the recorded text when the deltas stopped short). A step with no deltas sends its
  ``text`` as ``text-start`` / ``text-delta`` / ``text-end``. When a retried step streamed
  deltas that the recorded text does not continue, the live part is closed and the recorded
  text follows as a part of its own;
* ``tool_start`` of a client call is ``tool-input-available``; of a server tool or a
  sub-agent, the same with ``providerExecuted: true`` (the client must not run it);
* ``tool_approval_request`` is ``tool-input-available`` then ``tool-approval-request``;
* either, for a server tool that asks a person first (an MCP tool's ``input_required``:
  ``{"arguments", "inputRequests", "round"}`` as its input), is followed by a
  ``data-input-request`` part: ``{toolCallId, toolName, deadlineAt, inputRequests}``;
* ``tool_end``: an output is ``tool-output-available``; the error code (``errorCode``)
  ``approval_denied`` is ``tool-output-denied``; any other error is ``tool-output-error``
  with its text (``error``);
* the first model output after tool results opens a new step (``finish-step``, ``start-step``);
* ``suspended`` is ``finish-step`` + ``finish`` (``tool-calls``): the client answers the calls
  and sends the next request;
* ``turn_end``: ``completed`` is ``finish-step`` + ``finish`` (``stop``); ``failed`` is
  ``error`` + ``finish`` (``error``); ``interrupted`` is ``abort``;
* ``companion_message`` (a companion's reply, docs/companions.md) is a ``data-companion-message``
  part whose ``data`` is the event's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .frames import SSE_HEADERS, frame, frames

__all__ = [
    "DONE",
    "UI_MESSAGE_STREAM_HEADERS",
    "Chunk",
    "UIMessageStream",
    "encode_chunk",
    "encode_chunks",
    "tool_error_code",
    "tool_error_text",
]

Chunk = dict[str, Any]
"""One UI message stream chunk: ``{"type": ..., ...}``."""

#: The last frame of every stream.
DONE = b"data: [DONE]\n\n"

#: The response headers of a UI message stream.
UI_MESSAGE_STREAM_HEADERS = {**SSE_HEADERS, "X-Vercel-AI-UI-Message-Stream": "v1"}

#: The ``tool_end`` error code of a call a human denied.
DENIED = "approval_denied"


#: One chunk as an SSE frame (``data: <json>``).
encode_chunk = frame
#: Several chunks' frames, concatenated.
encode_chunks = frames


def _error_text(error: Any) -> str:
    if isinstance(error, Mapping):
        message = error.get("message")
        if isinstance(message, str) and message:
            return message
        code = error.get("code")
        if isinstance(code, str) and code:
            return code
    elif isinstance(error, str) and error:
        return error
    return "The turn failed"


def tool_error_code(data: Mapping[str, Any]) -> str | None:
    """The machine code of a failed ``tool_end``: ``errorCode`` (events written before it
    existed carried the code in ``error``)."""
    code = data.get("errorCode", data.get("error") if "errorText" in data else None)
    return code if isinstance(code, str) else None


def tool_error_text(data: Mapping[str, Any]) -> str:
    """The text of a failed ``tool_end``: ``error`` (older events: ``errorText``)."""
    text = data.get("errorText") if "errorText" in data else data.get("error")
    if isinstance(text, str) and text:
        return text
    return str(data.get("errorCode") or data.get("error") or "tool_error")


#: Session events sent as data parts: a companion's reply, a quorum's progress ("1 of 2").
_DATA_PARTS = {
    "companion_message": "data-companion-message",
    "tool_approval_counted": "data-approval-quorum",
}


class UIMessageStream:
    """The chunks of one response stream, from the session events it is fed in order.

    Args:
        message_id: the assistant message's id for the ``start`` chunk; ``None`` omits it
            (the client keeps the id it has, e.g. when it continues its last message).
    """

    def __init__(self, message_id: str | None = None) -> None:
        self.message_id = message_id
        self.started = False
        self.finished = False
        self._step_open = False
        self._after_results = False
        self._seen: set[str] = set()
        self._texts = 0
        self._live: dict[Any, list[str]] = {}
        """Open live text parts by model step: ``[text id, text streamed so far]``."""

    @property
    def seen_tool_call_ids(self) -> frozenset[str]:
        """The calls whose input this stream has sent."""
        return frozenset(self._seen)

    def start(self) -> list[Chunk]:
        """``start`` + ``start-step`` the first time; nothing after."""
        if self.started:
            return []
        self.started = True
        self._step_open = True
        head: Chunk = {"type": "start"}
        if self.message_id is not None:
            head["messageId"] = self.message_id
        return [head, {"type": "start-step"}]

    def _model_output(self) -> list[Chunk]:
        # Model output after tool results belongs to the next step.
        out = self.start()
        if self._after_results or not self._step_open:
            self._after_results = False
            if self._step_open:
                out.append({"type": "finish-step"})
            out.append({"type": "start-step"})
            self._step_open = True
        return out

    def _close_live(self) -> list[Chunk]:
        out: list[Chunk] = [
            {"type": "text-end", "id": text_id} for text_id, _ in self._live.values()
        ]
        self._live.clear()
        return out

    def _text_id(self, event: Mapping[str, Any]) -> str:
        self._texts += 1
        sequence = event.get("sequence")
        return f"text_{sequence}" if sequence else f"text_{self._texts}"

    def _delta(self, event: Mapping[str, Any], data: Mapping[str, Any]) -> list[Chunk]:
        delta = data.get("delta")
        if not isinstance(delta, str) or not delta:
            return []
        step = data.get("step")
        live = self._live.get(step)
        out: list[Chunk] = []
        if live is None:
            out = self._model_output()
            live = self._live[step] = [self._text_id(event), ""]
            out.append({"type": "text-start", "id": live[0]})
        live[1] += delta
        out.append({"type": "text-delta", "id": live[0], "delta": delta})
        return out

    def _text(self, event: Mapping[str, Any], data: Mapping[str, Any]) -> list[Chunk]:
        text = data.get("text")
        if not isinstance(text, str) or not text:
            return []
        out = self._model_output()
        live = self._live.pop(data.get("step"), None)
        if live is not None:
            text_id, streamed = live
            if text.startswith(streamed):
                if len(text) > len(streamed):
                    out.append(
                        {"type": "text-delta", "id": text_id, "delta": text[len(streamed) :]}
                    )
                out.append({"type": "text-end", "id": text_id})
                return out
            out.append({"type": "text-end", "id": text_id})
        text_id = self._text_id(event)
        out += [
            {"type": "text-start", "id": text_id},
            {"type": "text-delta", "id": text_id, "delta": text},
            {"type": "text-end", "id": text_id},
        ]
        return out

    def _finish(self, reason: str) -> list[Chunk]:
        out = self.start() + self._close_live()
        if self._step_open:
            out.append({"type": "finish-step"})
            self._step_open = False
        out.append({"type": "finish", "finishReason": reason})
        self.finished = True
        return out

    def translate(self, event: Mapping[str, Any]) -> list[Chunk]:
        """The chunks of one session event (``{type, data, sequence?}``); unknown events and
        events after the finish give none."""
        if self.finished:
            return []
        kind = event.get("type")
        raw = event.get("data")
        data: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        if kind == "turn_start":
            return self.start()
        if kind == "text_delta":
            return self._delta(event, data)
        if kind == "text":
            return self._text(event, data)
        if kind == "tool_start":
            return self._model_output() + self._input(data, data.get("kind") == "client")
        if kind == "tool_approval_request":
            return self._model_output() + self._input(data, True)
        if kind == "tool_end":
            return self._output(data)
        if kind == "user_message":
            # The client has its own message; one delivered over pending calls follows their
            # results, so the model's next output is already a new step.
            return self.start()
        if kind in _DATA_PARTS:
            return [*self.start(), {"type": _DATA_PARTS[kind], "data": dict(data)}]
        if kind == "suspended":
            return self._finish("tool-calls")
        if kind == "turn_end":
            outcome = data.get("outcome")
            if outcome == "completed":
                return self._finish("stop")
            if outcome == "interrupted":
                self.finished = True
                return [
                    *self.start(),
                    *self._close_live(),
                    {"type": "abort", "reason": "interrupted"},
                ]
            out = self.start() + self._close_live()
            out.append({"type": "error", "errorText": _error_text(data.get("error"))})
            out.append({"type": "finish", "finishReason": "error"})
            self.finished = True
            return out
        return []

    def _input(self, data: Mapping[str, Any], client_side: bool) -> list[Chunk]:
        tool_call_id = str(data.get("toolCallId", ""))
        self._seen.add(tool_call_id)
        chunk: Chunk = {
            "type": "tool-input-available",
            "toolCallId": tool_call_id,
            "toolName": data.get("toolName"),
            "input": data.get("input"),
        }
        if not client_side:
            chunk["providerExecuted"] = True
        out = [chunk]
        approval_id = data.get("approvalId")
        if approval_id is not None:
            out.append(
                {
                    "type": "tool-approval-request",
                    "approvalId": approval_id,
                    "toolCallId": tool_call_id,
                }
            )
        asked = _asked(data)
        if asked is not None:
            out.append({"type": "data-input-request", "data": asked})
        return out

    def _output(self, data: Mapping[str, Any]) -> list[Chunk]:
        out = self.start()
        self._after_results = True
        tool_call_id = data.get("toolCallId")
        if "error" not in data:
            out.append(
                {
                    "type": "tool-output-available",
                    "toolCallId": tool_call_id,
                    "output": data.get("output"),
                }
            )
        elif tool_error_code(data) == DENIED:
            out.append({"type": "tool-output-denied", "toolCallId": tool_call_id})
        else:
            out.append(
                {
                    "type": "tool-output-error",
                    "toolCallId": tool_call_id,
                    "errorText": tool_error_text(data),
                }
            )
        return out

    def pending(self, calls: Iterable[Mapping[str, Any]]) -> list[Chunk]:
        """The inputs of pending calls (a status view's ``pendingToolCalls``) this stream has
        not sent yet: a reconnect's replay, or a sub-agent's calls surfaced at the root."""
        if self.finished:
            return []
        out: list[Chunk] = []
        for call in calls:
            if call.get("submittedAt") is not None or call.get("toolCallId") in self._seen:
                continue
            if not out:
                out = self._model_output()
            out += self._input(call, True)
        return out

    def finish(self, reason: str = "stop") -> list[Chunk]:
        """Close a stream that no event finished (``finish-step`` if open, then ``finish``)."""
        if self.finished:
            return []
        return self._finish(reason)


def _asked(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The questions of a call whose server tool asked a person (docs/mcp.md), with the
    call's deadline; ``None`` for any other call."""
    shown = data.get("input")
    if not isinstance(shown, Mapping) or not {"arguments", "inputRequests"} <= shown.keys():
        return None
    return {
        "toolCallId": data.get("toolCallId"),
        "toolName": data.get("toolName"),
        "deadlineAt": data.get("deadlineAt"),
        "inputRequests": shown["inputRequests"],
    }
