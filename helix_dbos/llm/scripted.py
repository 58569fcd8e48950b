"""A deterministic scripted model for tests, demos and users' own tests.

The script is a function of the request, so the same conversation always gets the same answer,
in any process (a crash-recovery test restarts the process and the script still agrees).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections import deque
from collections.abc import Callable
from typing import Any

from ..core.llm import LLMRequest, LLMResponse, TextSink, Usage
from ..core.messages import Message, ToolCall
from ..errors import ConfigError

__all__ = ["Script", "ScriptedLLM", "call", "reply", "word_chunks"]

Script = Callable[[LLMRequest], LLMResponse]

# A word and the whitespace after it, or whitespace alone (at the start of the text).
_WORD = re.compile(r"\S+\s*|\s+")


def word_chunks(text: str) -> list[str]:
    """``text`` cut into words, each with the whitespace after it; joined, they are ``text``."""
    return _WORD.findall(text)


def reply(text: str) -> LLMResponse:
    """A response that ends the turn with ``text``."""
    return LLMResponse(text=text, usage=Usage(input_tokens=10, output_tokens=len(text.split())))


def call(request: LLMRequest, *calls: tuple[str, dict[str, Any]], text: str = "") -> LLMResponse:
    """A response that calls tools; ids derive from the request so they are deterministic."""
    tool_calls = [
        ToolCall(id=_call_id(request, i), name=name, input=args)
        for i, (name, args) in enumerate(calls)
    ]
    return LLMResponse(
        text=text,
        tool_calls=tool_calls,
        usage=Usage(input_tokens=10, output_tokens=5),
        stop_reason="tool_use",
    )


def _call_id(request: LLMRequest, index: int) -> str:
    seed = f"{request.session_id}:{request.run_id}:{len(request.messages)}:{index}"
    return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:16]


class ScriptedLLM:
    """A model whose answers come from a script.

    Args:
        script: ``request -> response``. ``helix_dbos.llm.scripted.reply`` and ``call`` build
            responses.
        name: the adapter's name.
        delay_seconds: how long each call takes before it answers, like a real model's
            latency (fault tests use it to stop or crash a server mid model call).
        keep_requests: how many of the latest requests to keep in ``requests`` (a demo
            server runs for ever: it must not keep every conversation it was sent).
        stream_pause_seconds: how the reply's text streams to the ``on_text`` sink. ``0``
            (the default, fast for tests): as one delta. Above ``0``: word by word
            (``word_chunks``), this long apart, as a real model streams. The runtime
            coalesces deltas (``helix_dbos.runtime._turn.deltas.FLUSH_SECONDS``, 0.05 s), so a
            pause longer than that makes each word its own ``text_delta`` event.

    Raises:
        ConfigError: a negative ``stream_pause_seconds``.

    Attributes:
        requests: the latest requests received, oldest first.
    """

    def __init__(
        self,
        script: Script,
        name: str = "scripted",
        delay_seconds: float = 0.0,
        keep_requests: int = 1000,
        stream_pause_seconds: float = 0.0,
    ) -> None:
        if stream_pause_seconds < 0:
            raise ConfigError(
                f"ScriptedLLM: stream_pause_seconds must be >= 0, not {stream_pause_seconds}"
            )
        self.name = name
        self._script = script
        self.delay_seconds = delay_seconds
        self.stream_pause_seconds = stream_pause_seconds
        self.requests: deque[LLMRequest] = deque(maxlen=keep_requests)
        self._calls = 0

    @property
    def calls(self) -> int:
        """How many model calls ran in this process."""
        return self._calls

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """Answer from the script; stream its text (see ``stream_pause_seconds``)."""
        self._calls += 1
        if self.requests.maxlen != 0:  # a copy only to keep (one per call was a real cost)
            self.requests.append(request.model_copy(deep=True))
        if self.delay_seconds > 0:
            await asyncio.sleep(self.delay_seconds)
        response = self._script(request)
        if on_text is not None and response.text:
            await self._stream(response.text, on_text)
        return response

    async def _stream(self, text: str, on_text: TextSink) -> None:
        if self.stream_pause_seconds <= 0:
            await on_text(text)
            return
        for i, chunk in enumerate(word_chunks(text)):
            if i:
                await asyncio.sleep(self.stream_pause_seconds)
            await on_text(chunk)


def last_message(request: LLMRequest) -> Message | None:
    """The last message of the request's conversation, if any."""
    return request.messages[-1] if request.messages else None
