"""Translating a session's events into the Vercel AI SDK UI message stream (v1 wire).

Pure: no I/O, no web framework. ``UIMessageStream`` turns the stored events of one turn
(``turn_start``, ``text``, ``tool_start``, ``tool_approval_request``, ``suspended``,
``tool_end``, ``turn_end``) into the chunks a ``useChat`` client understands; ``encode_chunk``
frames one chunk as ``data: <json>\\n\\n`` and ``DONE`` ends a stream.

The mapping:

* the first chunk of a stream is ``start`` (with the message id) and ``start-step``;
* ``text`` is ``text-start`` / ``text-delta`` / ``text-end`` with one id per text;
* ``tool_start`` of a client call is ``tool-input-available``; of a server tool or a
  sub-agent, the same with ``providerExecuted: true`` (the client must not run it);
* ``tool_approval_request`` is ``tool-input-available`` then ``tool-approval-request``;
* ``tool_end``: an output is ``tool-output-available``; the error ``approval_denied`` is
  ``tool-output-denied``; any other error is ``tool-output-error`` with its text;
* the first model output after tool results opens a new step (``finish-step``, ``start-step``);
* ``suspended`` is ``finish-step`` + ``finish`` (``tool-calls``): the client answers the calls
  and sends the next request;
* ``turn_end``: ``completed`` is ``finish-step`` + ``finish`` (``stop``); ``failed`` is
  ``error`` + ``finish`` (``error``); ``interrupted`` is ``abort``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "DONE",
    "UI_MESSAGE_STREAM_HEADERS",
    "Chunk",
    "UIMessageStream",
    "encode_chunk",
    "encode_chunks",
]

Chunk = dict[str, Any]
"""One UI message stream chunk: ``{"type": ..., ...}``."""

#: The last frame of every stream.
DONE = b"data: [DONE]\n\n"

#: The response headers of a UI message stream.
UI_MESSAGE_STREAM_HEADERS = {
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    "X-Vercel-AI-UI-Message-Stream": "v1",
    # Proxies such as nginx buffer responses by default, which would hold chunks back.
    "X-Accel-Buffering": "no",
}

#: The ``tool_end`` error code of a call a human denied.
DENIED = "approval_denied"


def encode_chunk(chunk: Chunk) -> bytes:
    """One SSE frame (``json.dumps`` escapes newlines, so the data is one line)."""
    return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()


def encode_chunks(chunks: Iterable[Chunk]) -> bytes:
    """Several frames, concatenated."""
    return b"".join(encode_chunk(c) for c in chunks)


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

    def _finish(self, reason: str) -> list[Chunk]:
        out = self.start()
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
        if kind == "text":
            text = data.get("text")
            if not isinstance(text, str) or not text:
                return []
            out = self._model_output()
            self._texts += 1
            sequence = event.get("sequence")
            text_id = f"text_{sequence}" if sequence else f"text_{self._texts}"
            out += [
                {"type": "text-start", "id": text_id},
                {"type": "text-delta", "id": text_id, "delta": text},
                {"type": "text-end", "id": text_id},
            ]
            return out
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
        if kind == "suspended":
            return self._finish("tool-calls")
        if kind == "turn_end":
            outcome = data.get("outcome")
            if outcome == "completed":
                return self._finish("stop")
            if outcome == "interrupted":
                self.finished = True
                return [*self.start(), {"type": "abort", "reason": "interrupted"}]
            out = self.start()
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
        elif data.get("error") == DENIED:
            out.append({"type": "tool-output-denied", "toolCallId": tool_call_id})
        else:
            text = data.get("errorText")
            out.append(
                {
                    "type": "tool-output-error",
                    "toolCallId": tool_call_id,
                    "errorText": text if isinstance(text, str) and text else str(data["error"]),
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
