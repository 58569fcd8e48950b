"""An adapter for OpenAI's Chat Completions API and the servers that speak it.

Works with OpenAI itself and with OpenAI-compatible servers (vLLM, Ollama, LiteLLM, Azure
behind a proxy ...) through ``base_url``. Needs the optional extra:
``pip install 'helix-dbos[openai]'``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.llm import LLMRequest, LLMResponse, TextSink, ToolSchema, Usage
from ..core.messages import Message, ToolCall
from ..errors import ConfigError, ProviderError
from ._clients import PerLoopClients, sdk_client_factory
from ._errors import classify, error_fields, incomplete_stream, is_transport_error, transport_error

if TYPE_CHECKING:
    from openai import AsyncOpenAI, AsyncStream
    from openai.types.chat import ChatCompletionChunk

__all__ = ["RAW_ARGUMENTS_KEY", "OpenAICompatibleLLM", "to_openai_messages", "to_openai_tools"]

_PROVIDER = "OpenAI"

#: Tool arguments that are not a JSON object arrive as ``{RAW_ARGUMENTS_KEY: "<the text>"}``.
RAW_ARGUMENTS_KEY = "_raw"

# Chat Completions finish reasons in the vocabulary of ``LLMResponse.stop_reason``.
_STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}


class OpenAICompatibleLLM:
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
        try:
            import openai
        except ImportError as exc:
            raise ConfigError(
                "OpenAICompatibleLLM needs the openai package: pip install 'helix-dbos[openai]'"
            ) from exc
        if not model:
            raise ConfigError("OpenAICompatibleLLM needs a model name")
        self.name = f"openai:{model}"
        self.model = model
        self.max_tokens = max_tokens
        self._clients: PerLoopClients[AsyncOpenAI] = PerLoopClients(
            sdk_client_factory(
                openai.AsyncOpenAI,
                injected=client,
                api_key=api_key,
                base_url=base_url,
                key_env="OPENAI_API_KEY",
                url_env="OPENAI_BASE_URL",
                timeout=timeout,
                label="OpenAICompatibleLLM",
            )
        )

    def _client(self) -> AsyncOpenAI:
        return self._clients.get()

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """Run one streamed Chat Completions call.

        Args:
            request: instructions, conversation and tools.
            on_text: receives each text delta as it arrives.

        Returns:
            The text, the tool calls (with the provider's ids) and the token usage.

        Raises:
            ProviderError: with a ``provider_*`` code; ``retryable`` says whether the step may
                run it again.
        """
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
        try:
            stream = await self._client().chat.completions.create(**params)
        except Exception as exc:
            mapped = _map_error(exc)
            if mapped is None:
                raise
            raise mapped from exc
        assembler = _StreamAssembler(request)
        try:
            async with aclosing(_chunks(stream)) as chunks:
                async for chunk in chunks:
                    delta = assembler.add(chunk)
                    # Outside the mapping on purpose: a failing sink is the caller's error,
                    # not the provider's.
                    if delta and on_text is not None:
                        await on_text(delta)
        finally:
            await stream.close()
        return assembler.response()


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
                {"role": "tool", "tool_call_id": msg.tool_call_id, "content": _tool_text(msg)}
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


def _tool_text(msg: Message) -> str:
    # ``content`` is the result as the model should read it; fall back to the JSON result (or
    # the error code) so a tool message never reaches the provider empty.
    if msg.content:
        return msg.content
    if msg.is_error:
        return msg.error_code or "The tool call failed"
    return json.dumps(msg.result) if msg.result is not None else ""


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
                input=_parse_arguments(slot.arguments),
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


def _parse_arguments(raw: str) -> dict[str, Any]:
    """The call's arguments as a JSON object.

    Arguments that are not a JSON object (truncated by ``max_tokens``, or malformed) are kept
    as ``{"_raw": text}`` rather than failing the call: the tool's input validation then
    rejects them and the model sees a failed tool result it can correct.
    """
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {RAW_ARGUMENTS_KEY: raw}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS_KEY: raw}


async def _chunks(stream: AsyncStream[ChatCompletionChunk]) -> AsyncGenerator[ChatCompletionChunk]:
    """The stream's chunks, with SDK and network failures turned into ``ProviderError``."""
    try:
        async for chunk in stream:
            yield chunk
    except Exception as exc:
        mapped = _map_error(exc)
        if mapped is None:
            raise
        raise mapped from exc


def _map_error(exc: Exception) -> ProviderError | None:
    """The ``ProviderError`` for an SDK or network failure; None for anything else."""
    import openai

    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return transport_error(_PROVIDER, exc.__cause__ or exc)
    if isinstance(exc, openai.APIStatusError):
        kind, code, message = error_fields(exc.body)
        return classify(
            _PROVIDER,
            status=exc.status_code,
            message=message or exc.message,
            error_type=kind,
            error_code=code or exc.code,
        )
    if isinstance(exc, openai.APIError):
        # An error event inside the stream: no status, only the body.
        kind, code, message = error_fields(exc.body)
        return classify(
            _PROVIDER,
            status=None,
            message=message or exc.message,
            error_type=kind,
            error_code=code or exc.code,
        )
    if is_transport_error(exc):
        return transport_error(_PROVIDER, exc)
    return None
