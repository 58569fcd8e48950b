"""A deterministic scripted model for tests, demos and users' own tests.

The script is a function of the request, so the same conversation always gets the same answer,
in any process (a crash-recovery test restarts the process and the script still agrees).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from collections.abc import Callable
from typing import Any

from ..core.llm import LLMRequest, LLMResponse, TextSink, Usage
from ..core.messages import Message, ToolCall

__all__ = ["Script", "ScriptedLLM", "call", "reply"]

Script = Callable[[LLMRequest], LLMResponse]


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

    Attributes:
        requests: the latest requests received, oldest first.
    """

    def __init__(
        self,
        script: Script,
        name: str = "scripted",
        delay_seconds: float = 0.0,
        keep_requests: int = 1000,
    ) -> None:
        self.name = name
        self._script = script
        self.delay_seconds = delay_seconds
        self.requests: deque[LLMRequest] = deque(maxlen=keep_requests)
        self._calls = 0

    @property
    def calls(self) -> int:
        """How many model calls ran in this process."""
        return self._calls

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """Answer from the script; stream the text as one delta."""
        self._calls += 1
        if self.requests.maxlen != 0:  # a copy only to keep (one per call was a real cost)
            self.requests.append(request.model_copy(deep=True))
        if self.delay_seconds > 0:
            await asyncio.sleep(self.delay_seconds)
        response = self._script(request)
        if on_text is not None and response.text:
            await on_text(response.text)
        return response


def last_message(request: LLMRequest) -> Message | None:
    """The last message of the request's conversation, if any."""
    return request.messages[-1] if request.messages else None
