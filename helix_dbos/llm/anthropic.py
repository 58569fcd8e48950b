"""An adapter for Anthropic's Messages API.

Needs the optional extra: ``pip install 'helix-dbos[anthropic]'``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.llm import LLMRequest, LLMResponse, ToolSchema, Usage
from ..core.messages import Message, ToolCall
from ..errors import ConfigError, ProviderError
from ._adapter import StreamingAdapter, parse_arguments, tool_text
from ._errors import classify_body, incomplete_stream, transport_error

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic, AsyncStream
    from anthropic.types import (
        RawContentBlockDeltaEvent,
        RawContentBlockStartEvent,
        RawMessageDeltaEvent,
        RawMessageStartEvent,
        RawMessageStreamEvent,
    )

__all__ = ["AnthropicLLM", "to_anthropic_messages", "to_anthropic_tools"]

_PROVIDER = "Anthropic"


class AnthropicLLM(StreamingAdapter["AsyncAnthropic", "RawMessageStreamEvent"]):
    """A Claude model behind Anthropic's Messages API.

    Every call streams, so text reaches ``on_text`` as it is generated; tool calls keep
    Anthropic's ``toolu_`` ids. The SDK's own retries are off: a retryable ``ProviderError``
    is retried by the runtime's durable model step instead, so one attempt is one recorded
    step attempt.

    Args:
        model: the model name (``claude-sonnet-4-5`` ...).
        api_key: the key; defaults to ``ANTHROPIC_API_KEY``. A proxy at a custom
            ``base_url`` may need none, and then a placeholder is sent.
        base_url: the endpoint; defaults to ``ANTHROPIC_BASE_URL`` or Anthropic.
        timeout: seconds for connecting and for each wait on the stream.
        max_tokens: the cap on generated tokens (the Messages API requires one).
        client: a ready ``anthropic.AsyncAnthropic`` to use instead (Bedrock or Vertex
            clients work too); it is copied with retries turned off.

    Raises:
        ConfigError: the ``anthropic`` package is not installed, or no key is configured for
            Anthropic itself.
    """

    label = "AnthropicLLM"
    provider = _PROVIDER
    package = "anthropic"
    scheme = "anthropic"
    key_env = "ANTHROPIC_API_KEY"
    url_env = "ANTHROPIC_BASE_URL"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_tokens: int = 4096,
        client: AsyncAnthropic | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        super().__init__(model, api_key=api_key, base_url=base_url, timeout=timeout, client=client)

    def _check_options(self) -> None:
        if self.max_tokens < 1:
            raise ConfigError("AnthropicLLM: max_tokens must be >= 1")

    def _sdk_class(self) -> Callable[..., AsyncAnthropic]:
        import anthropic

        return anthropic.AsyncAnthropic

    async def _open(
        self, client: AsyncAnthropic, request: LLMRequest
    ) -> AsyncStream[RawMessageStreamEvent]:
        """One streamed Messages call."""
        system, messages = to_anthropic_messages(request.instructions, request.messages)
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages,
            "stream": True,
        }
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = to_anthropic_tools(request.tools)
        stream: AsyncStream[RawMessageStreamEvent] = await client.messages.create(**params)
        return stream

    def _assembler(self, request: LLMRequest) -> _StreamAssembler:
        return _StreamAssembler()

    def _map_sdk_error(self, exc: Exception) -> ProviderError | None:
        import anthropic

        if isinstance(exc, anthropic.APIConnectionError):  # includes APITimeoutError
            return transport_error(_PROVIDER, exc.__cause__ or exc)
        if isinstance(exc, anthropic.APIStatusError):
            # An ``error`` event inside a stream arrives as a status error of the 200 response.
            status = exc.status_code if exc.status_code >= 400 else None
            return classify_body(_PROVIDER, status=status, body=exc.body, message=exc.message)
        return None


def to_anthropic_messages(
    instructions: str, messages: list[Message]
) -> tuple[str, list[dict[str, Any]]]:
    """Our conversation as the Messages API's ``system`` and ``messages``.

    The instructions, and any system messages, go to the top-level ``system`` text. Tool
    results become ``tool_result`` blocks in a user message; consecutive messages of one role
    are merged into one, because the API wants roles to alternate and all results of one
    assistant message in the single user message after it. Empty texts are dropped (the API
    refuses empty text blocks).

    Returns:
        ``(system, messages)``; ``system`` is "" when there is none.
    """
    system_parts = [instructions] if instructions else []
    out: list[dict[str, Any]] = []
    for msg in messages:
        if msg.role == "system":
            if msg.content:
                system_parts.append(msg.content)
            continue
        role = "assistant" if msg.role == "assistant" else "user"
        blocks = _blocks(msg)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for entry in out:
        if entry["role"] == "user":
            # Tool results must open the user message that answers a tool use.
            entry["content"].sort(key=lambda block: block["type"] != "tool_result")
    return "\n\n".join(system_parts), out


def _blocks(msg: Message) -> list[dict[str, Any]]:
    if msg.role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": msg.tool_call_id}
        text = tool_text(msg)
        if text:
            block["content"] = text
        if msg.is_error:
            block["is_error"] = True
        return [block]
    blocks: list[dict[str, Any]] = []
    if msg.content:
        blocks.append({"type": "text", "text": msg.content})
    if msg.role == "assistant":
        blocks.extend(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}
            for call in msg.tool_calls
        )
    return blocks


def to_anthropic_tools(tools: list[ToolSchema]) -> list[dict[str, Any]]:
    """Tool schemas as Messages API tools."""
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
        for tool in tools
    ]


class _StreamAssembler:
    """Folds the Messages stream events into one ``LLMResponse``."""

    def __init__(self) -> None:
        self._text: list[str] = []
        # Tool-use blocks by content index: [id, name, start input, partial JSON pieces].
        self._tools: dict[int, tuple[str, str, dict[str, Any], list[str]]] = {}
        self._input = 0
        self._cache_read = 0
        self._cache_write = 0
        self._output = 0
        self._stop_reason: str | None = None
        self._stopped = False

    def add(self, event: RawMessageStreamEvent) -> str:
        """Take one event; return its text delta ("" if none)."""
        if event.type == "message_start":
            self._start_message(event)
        elif event.type == "content_block_start":
            return self._start_block(event)
        elif event.type == "content_block_delta":
            return self._add_delta(event)
        elif event.type == "message_delta":
            self._end_message(event)
        elif event.type == "message_stop":
            self._stopped = True
        return ""

    def _start_message(self, event: RawMessageStartEvent) -> None:
        """``message_start``: the prompt's token counts (and the output's so far)."""
        usage = event.message.usage
        self._input = usage.input_tokens
        self._cache_read = usage.cache_read_input_tokens or 0
        self._cache_write = usage.cache_creation_input_tokens or 0
        self._output = usage.output_tokens

    def _start_block(self, event: RawContentBlockStartEvent) -> str:
        """``content_block_start``: a tool call opens (its input follows in pieces), or a text
        block opens with its first text, which is returned."""
        block = event.content_block
        if block.type == "tool_use":
            start = dict(block.input) if isinstance(block.input, dict) else {}
            self._tools[event.index] = (block.id, block.name, start, [])
        elif block.type == "text" and block.text:
            self._text.append(block.text)
            return block.text
        return ""

    def _add_delta(self, event: RawContentBlockDeltaEvent) -> str:
        """``content_block_delta``: more text (returned), or a piece of a tool call's input."""
        delta = event.delta
        if delta.type == "text_delta":
            self._text.append(delta.text)
            return delta.text
        if delta.type == "input_json_delta" and event.index in self._tools:
            self._tools[event.index][3].append(delta.partial_json)
        return ""

    def _end_message(self, event: RawMessageDeltaEvent) -> None:
        """``message_delta``: the stop reason and the message's final token counts."""
        if event.delta.stop_reason is not None:
            self._stop_reason = event.delta.stop_reason
        # The counts here are cumulative for the whole message, so they replace.
        totals = event.usage
        self._output = totals.output_tokens
        if totals.input_tokens is not None:
            self._input = totals.input_tokens
        if totals.cache_read_input_tokens is not None:
            self._cache_read = totals.cache_read_input_tokens
        if totals.cache_creation_input_tokens is not None:
            self._cache_write = totals.cache_creation_input_tokens

    def response(self) -> LLMResponse:
        """The assembled answer.

        ``usage.input_tokens`` counts every prompt token, cached or not, as OpenAI does
        (Anthropic reports cache reads and writes apart), so ``cached_tokens`` is a part of
        it under either provider.

        Raises:
            ProviderError: the stream ended before ``message_stop`` (retryable).
        """
        if not self._stopped:
            raise incomplete_stream(_PROVIDER)
        calls = [
            ToolCall(id=call_id, name=name, input=_parse_input(pieces, start))
            for _, (call_id, name, start, pieces) in sorted(self._tools.items())
        ]
        usage = Usage(
            input_tokens=self._input + self._cache_read + self._cache_write,
            output_tokens=self._output,
            cached_tokens=self._cache_read,
        )
        stop = self._stop_reason or ("tool_use" if calls else "end_turn")
        return LLMResponse(
            text="".join(self._text), tool_calls=calls, usage=usage, stop_reason=stop
        )


def _parse_input(pieces: list[str], start: dict[str, Any]) -> dict[str, Any]:
    """A tool use's input: the streamed JSON, else the block's starting input.

    Input that is not a JSON object (cut off by ``max_tokens``) is kept as
    ``{"_raw": text}`` (``parse_arguments``), so the tool's validation reports it to the
    model instead of the call failing.
    """
    return parse_arguments("".join(pieces), start)
