"""Local fake provider servers that speak real HTTP/1.1 and Server-Sent Events.

A ``FakeServer`` listens on 127.0.0.1 (a free port) with its own event loop in a thread, so it
serves the SDK clients whichever loop (or thread) they run on. It records every request and
answers from a queue of scripted ``Reply`` objects, then from an optional ``responder``
function of the request (for multi-call conversations).

Streaming replies use chunked transfer encoding, one chunk per SSE frame, which lets a reply
break the connection in the middle of a stream the way a dropped network would.

Builders produce the documented wire shapes: ``openai_*`` for Chat Completions
(``data: {...}`` frames ending in ``data: [DONE]``) and ``anthropic_*`` for the Messages API
(``event: message_start`` ... ``event: message_stop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FakeServer",
    "Recorded",
    "Reply",
    "anthropic_error",
    "anthropic_stream",
    "anthropic_text",
    "anthropic_tool_use",
    "openai_chunk",
    "openai_error",
    "openai_stream",
    "openai_text",
    "openai_tool_calls",
    "openai_usage",
    "running",
    "sse",
]


@dataclass
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    """The JSON body (None when the body was empty)."""


@dataclass
class Reply:
    """One scripted HTTP answer.

    Attributes:
        status: the HTTP status.
        frames: SSE frames for a streamed answer (None for a JSON answer).
        body: the JSON body of a non-streamed answer.
        disconnect_after: abort the connection after sending this many frames.
        delay: seconds to wait before answering (to trip client timeouts).
        headers: extra response headers.
    """

    status: int = 200
    frames: list[str] | None = None
    body: Any = None
    disconnect_after: int | None = None
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


Responder = Callable[[Recorded], Reply]


class FakeServer:
    """A real HTTP server on a free local port, answering scripted replies.

    Use it as a context manager, or call ``start`` and ``close``.

    Args:
        responder: answers requests once the ``enqueue``-d replies are used up.
    """

    def __init__(self, responder: Responder | None = None) -> None:
        self.requests: list[Recorded] = []
        self.responder = responder
        self._queue: deque[Reply] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """The server's root URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def bodies(self) -> list[Any]:
        """The JSON bodies received, in order."""
        return [r.body for r in self.requests]

    def enqueue(self, *replies: Reply) -> None:
        """Answer the next requests with these replies, in order."""
        self._queue.extend(replies)

    def start(self) -> FakeServer:
        """Start listening; returns self once the port is bound."""
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            self._server = loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", 0)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-provider", daemon=True)
        self._thread.start()
        ready.wait(5)
        return self

    def close(self) -> None:
        """Stop the server and drop open connections."""
        loop = self._loop
        if loop is None or self._thread is None:
            return

        def stop() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            loop.stop()

        loop.call_soon_threadsafe(stop)
        self._thread.join(5)
        self._loop = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_reply(self, request: Recorded) -> Reply:
        if self._queue:
            return self._queue.popleft()
        if self.responder is not None:
            return self.responder(request)
        return Reply(status=418, body={"error": {"message": "fake server: no reply scripted"}})

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            # HTTP/1.1 keep-alive: the SDK's pool reuses connections, so serve until EOF.
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                raw = await reader.readexactly(length) if length else b""
                request = Recorded(method, path, headers, json.loads(raw) if raw else None)
                self.requests.append(request)
                if not await self._answer(writer, self._next_reply(request)):
                    return
        except asyncio.CancelledError:
            # Shutting down: end quietly. A handler task that ends cancelled makes asyncio's
            # stream protocol log a spurious error on Python 3.11.
            return
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, reply: Reply) -> bool:
        """Write one reply; False when the connection was dropped on purpose."""
        if reply.delay:
            await asyncio.sleep(reply.delay)
        try:
            phrase = http.HTTPStatus(reply.status).phrase
        except ValueError:
            phrase = "Overloaded" if reply.status == 529 else "Error"
        status_line = f"HTTP/1.1 {reply.status} {phrase}\r\n"
        extra = "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
        if reply.frames is None:
            payload = json.dumps(reply.body).encode()
            writer.write(
                (
                    f"{status_line}content-type: application/json\r\n"
                    f"content-length: {len(payload)}\r\n{extra}\r\n"
                ).encode()
                + payload
            )
            await writer.drain()
            return True
        writer.write(
            (
                f"{status_line}content-type: text/event-stream\r\n"
                f"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n{extra}\r\n"
            ).encode()
        )
        for index, frame in enumerate(reply.frames):
            if reply.disconnect_after is not None and index >= reply.disconnect_after:
                await writer.drain()
                writer.transport.abort()
                return False
            data = frame.encode()
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


@contextlib.contextmanager
def running(responder: Responder | None = None) -> Iterator[FakeServer]:
    """A started ``FakeServer``, closed on exit."""
    server = FakeServer(responder).start()
    try:
        yield server
    finally:
        server.close()


def sse(data: Any, event: str | None = None) -> str:
    """One SSE frame; ``data`` is JSON-encoded unless it is already a string."""
    text = data if isinstance(data, str) else json.dumps(data)
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {text}\n\n"


# --- OpenAI Chat Completions ---------------------------------------------------------------


def openai_chunk(
    delta: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    *,
    usage: dict[str, Any] | None = None,
    choices: bool = True,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` object."""
    chunk: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "fake-model",
        "choices": (
            [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}] if choices else []
        ),
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def openai_usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    """A Chat Completions usage object."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def openai_stream(
    chunks: list[dict[str, Any]], *, usage: dict[str, Any] | None = None, done: bool = True
) -> list[str]:
    """SSE frames for chunks, then the usage-only chunk and ``[DONE]``."""
    frames = [sse(c) for c in chunks]
    if usage is not None:
        frames.append(sse(openai_chunk(usage=usage, choices=False)))
    if done:
        frames.append(sse("[DONE]"))
    return frames


def openai_text(*pieces: str, usage: dict[str, Any] | None = None) -> Reply:
    """A streamed text answer, one delta per piece."""
    chunks = [openai_chunk({"role": "assistant", "content": ""})]
    chunks += [openai_chunk({"content": p}) for p in pieces]
    chunks.append(openai_chunk({}, "stop"))
    return Reply(frames=openai_stream(chunks, usage=usage or openai_usage(10, len(pieces))))


def openai_tool_calls(
    calls: list[tuple[str, str, list[str]]],
    *,
    text: str = "",
    usage: dict[str, Any] | None = None,
) -> Reply:
    """A streamed tool-calling answer.

    Args:
        calls: ``(id, name, argument pieces)`` per call; the pieces concatenate to the JSON.
        text: text streamed before the calls.
        usage: the usage object.
    """
    chunks = [openai_chunk({"role": "assistant", "content": text or None})]
    for index, (call_id, name, pieces) in enumerate(calls):
        chunks.append(
            openai_chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        chunks += [
            openai_chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in pieces
        ]
    chunks.append(openai_chunk({}, "tool_calls"))
    return Reply(frames=openai_stream(chunks, usage=usage or openai_usage(20, 8)))


def openai_error(
    status: int, message: str, *, type: str = "invalid_request_error", code: str | None = None
) -> Reply:
    """A Chat Completions error answer."""
    return Reply(
        status=status,
        body={"error": {"message": message, "type": type, "param": None, "code": code}},
    )


# --- Anthropic Messages --------------------------------------------------------------------


def anthropic_stream(
    blocks: list[dict[str, Any]],
    *,
    stop_reason: str = "end_turn",
    usage: dict[str, Any] | None = None,
    output_tokens: int = 5,
    stop: bool = True,
) -> list[str]:
    """SSE frames of one Messages stream.

    Args:
        blocks: ``{"type": "text", "pieces": [...]}`` or
            ``{"type": "tool_use", "id", "name", "pieces": [...]}`` (JSON pieces).
        stop_reason: the ``message_delta`` stop reason.
        usage: the ``message_start`` usage (input and cache counts).
        output_tokens: the final ``message_delta`` output count.
        stop: end with ``message_stop``.
    """
    start_usage = {"input_tokens": 12, "output_tokens": 1, **(usage or {})}
    frames = [
        sse(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": "fake-model",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
            "message_start",
        ),
        sse({"type": "ping"}, "ping"),
    ]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in block["pieces"]]
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in block["pieces"]]
        frames.append(
            sse(
                {"type": "content_block_start", "index": index, "content_block": start},
                "content_block_start",
            )
        )
        frames += [
            sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta")
            for d in deltas
        ]
        frames.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    frames.append(
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
            "message_delta",
        )
    )
    if stop:
        frames.append(sse({"type": "message_stop"}, "message_stop"))
    return frames


def anthropic_text(*pieces: str, usage: dict[str, Any] | None = None) -> Reply:
    """A streamed text answer, one delta per piece."""
    return Reply(frames=anthropic_stream([{"type": "text", "pieces": list(pieces)}], usage=usage))


def anthropic_tool_use(
    calls: list[tuple[str, str, list[str]]],
    *,
    text: str = "",
    usage: dict[str, Any] | None = None,
) -> Reply:
    """A streamed tool-use answer: optional text, then ``(id, name, JSON pieces)`` per call."""
    blocks: list[dict[str, Any]] = [{"type": "text", "pieces": [text]}] if text else []
    blocks += [{"type": "tool_use", "id": i, "name": n, "pieces": p} for i, n, p in calls]
    return Reply(frames=anthropic_stream(blocks, stop_reason="tool_use", usage=usage))


def anthropic_error(status: int, type: str, message: str) -> Reply:
    """A Messages API error answer."""
    return Reply(status=status, body={"type": "error", "error": {"type": type, "message": message}})
