"""An adapter for OpenAI's Chat Completions API and the servers that speak it.

Works with OpenAI itself and with OpenAI-compatible servers (vLLM, Ollama, LiteLLM, Azure
behind a proxy ...) through ``base_url``. Needs the optional extra:
``pip install 'helix-dbos[openai]'``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.llm import LLMRequest, LLMResponse, ToolSchema, Usage
from ..core.messages import Message, ToolCall
from ..errors import ProviderError
from ._adapter import RAW_ARGUMENTS_KEY, StreamingAdapter, parse_arguments, tool_text
from ._errors import classify_body, incomplete_stream, transport_error

if TYPE_CHECKING:
    from openai import AsyncOpenAI, AsyncStream
    from openai.types.chat import ChatCompletionChunk

__all__ = ["RAW_ARGUMENTS_KEY", "OpenAICompatibleLLM", "to_openai_messages", "to_openai_tools"]

_PROVIDER = "OpenAI"

# Chat Completions finish reasons in the vocabulary of ``LLMResponse.stop_reason``.
_STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}


class OpenAICompatibleLLM(StreamingAdapter["AsyncOpenAI", "ChatCompletionChunk"]):
    """A model behind an OpenAI-compatible Chat Completions endpoint.

    Every call streams (``stream=True`` with usage included), so text reaches ``on_text`` as it
    is generated. The SDK's own retries are off: a retryable ``ProviderError`` is retried by
    the runtime's durable model step instead, so one attempt is one recorded step attempt.

    Args:
        model: the model name sent to the endpoint (``gpt-4o-mini``, ``llama3.1`` ...).
        api_key: the key; defaults to ``OPENAI_API_KEY``. A server at a custom ``base_url``
            may need none, and then a placeholder is sent.
        base_url: the endpoint (``http://localhost:8000/v1``); defaults to
            ``OPENAI_BASE_URL`` or OpenAI.
        timeout: seconds for connecting and for each wait on the stream.
        client: a ready ``openai.AsyncOpenAI`` to use instead (Azure, custom transport); it
            is copied with retries turned off.
        max_tokens: a cap on generated tokens, sent as ``max_tokens`` (the field every
            compatible server understands); None sends no cap.

    Raises:
        ConfigError: the ``openai`` package is not installed, or no key is configured for
            OpenAI itself.
    """

    label = "OpenAICompatibleLLM"
    provider = _PROVIDER
    package = "openai"
    scheme = "openai"
    key_env = "OPENAI_API_KEY"
    url_env = "OPENAI_BASE_URL"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        client: AsyncOpenAI | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        super().__init__(model, api_key=api_key, base_url=base_url, timeout=timeout, client=client)

    def _sdk_class(self) -> Callable[..., AsyncOpenAI]:
        import openai

        return openai.AsyncOpenAI

    async def _open(
        self, client: AsyncOpenAI, request: LLMRequest
    ) -> AsyncStream[ChatCompletionChunk]:
        """One streamed Chat Completions call."""
        params: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(request.instructions, request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            params["tools"] = to_openai_tools(request.tools)
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        stream: AsyncStream[ChatCompletionChunk] = await client.chat.completions.create(**params)
        return stream

    def _assembler(self, request: LLMRequest) -> _StreamAssembler:
        return _StreamAssembler(request)

    def _map_sdk_error(self, exc: Exception) -> ProviderError | None:
        import openai

        if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
            return transport_error(_PROVIDER, exc.__cause__ or exc)
        if isinstance(exc, openai.APIError):
            # A status error is a response's; any other is an error event inside the stream:
            # no status, only the body.
            status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
            return classify_body(
                _PROVIDER, status=status, body=exc.body, message=exc.message, code=exc.code
            )
        return None


def to_openai_messages(instructions: str, messages: list[Message]) -> list[dict[str, Any]]:
    """Our conversation as Chat Completions messages, instructions first as a system message.

    A tool message becomes ``{"role": "tool", "tool_call_id", "content"}``. Chat Completions
    has no error flag on tool results, so a failed call is sent as its error text unchanged.
    """
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for msg in messages:
        if msg.role == "tool":
            out.append(
                {"role": "tool", "tool_call_id": msg.tool_call_id, "content": tool_text(msg)}
            )
        elif msg.role == "assistant" and msg.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    # Chat Completions wants null, not "", beside tool calls without text.
                    "content": msg.content or None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": json.dumps(call.input)},
                        }
                        for call in msg.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": msg.role, "content": msg.content})
    return out


def to_openai_tools(tools: list[ToolSchema]) -> list[dict[str, Any]]:
    """Tool schemas as Chat Completions function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.input_schema,
            },
        }
        for tool in tools
    ]


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


class _StreamAssembler:
    """Folds ``ChatCompletionChunk`` deltas into one ``LLMResponse``."""

    def __init__(self, request: LLMRequest) -> None:
        self._request = request
        self._text: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._finish: str | None = None
        self._usage = Usage()

    def add(self, chunk: ChatCompletionChunk) -> str:
        """Take one chunk; return its text delta ("" if none)."""
        if chunk.usage is not None:
            details = chunk.usage.prompt_tokens_details
            self._usage = Usage(
                input_tokens=chunk.usage.prompt_tokens or 0,
                output_tokens=chunk.usage.completion_tokens or 0,
                cached_tokens=(details.cached_tokens or 0) if details is not None else 0,
            )
        text = ""
        for choice in chunk.choices or []:
            # One completion is requested; other indexes would be a server bug, not an answer.
            if choice.index != 0:
                continue
            if choice.delta.content:
                text += choice.delta.content
            for tc in choice.delta.tool_calls or []:
                self._add_tool_delta(tc.index, tc.id, tc.function)
            if choice.finish_reason is not None:
                self._finish = choice.finish_reason
        if text:
            self._text.append(text)
        return text

    def _add_tool_delta(self, index: int | None, call_id: str | None, fn: Any) -> None:
        if index is None:
            # Some compatible servers omit the index; the id (or a new slot) stands in.
            index = next(
                (i for i, c in self._calls.items() if call_id and c.id == call_id),
                len(self._calls),
            )
        slot = self._calls.setdefault(index, _PartialCall())
        if call_id:
            slot.id = call_id
        if fn is None:
            return
        # The name normally arrives whole in the first delta; some servers repeat it.
        if fn.name and fn.name != slot.name:
            slot.name += fn.name
        if fn.arguments:
            slot.arguments += fn.arguments

    def response(self) -> LLMResponse:
        """The assembled answer.

        Raises:
            ProviderError: the stream ended before a finish reason (retryable).
        """
        if self._finish is None:
            raise incomplete_stream(_PROVIDER)
        calls = [
            ToolCall(
                id=slot.id or self._fallback_id(i),
                name=slot.name,
                input=parse_arguments(slot.arguments),
            )
            for i, (_, slot) in enumerate(sorted(self._calls.items()))
        ]
        stop = _STOP_REASONS.get(self._finish, self._finish)
        if calls:
            # Some compatible servers finish a tool-calling answer with "stop".
            stop = "tool_use"
        return LLMResponse(
            text="".join(self._text), tool_calls=calls, usage=self._usage, stop_reason=stop
        )

    def _fallback_id(self, index: int) -> str:
        # Servers that send no call id still need one that is stable across a replay.
        r = self._request
        seed = f"{r.session_id}:{r.run_id}:{r.step}:{len(r.messages)}:{index}"
        return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:24]
