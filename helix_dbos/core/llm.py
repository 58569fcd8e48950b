"""The small adapter protocol between the runtime and a language model.

Messages and tool schemas go in; text, tool calls and usage come out. Implementations live in
``helix_dbos.llm`` (the scripted model, OpenAI-compatible, Anthropic).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from .messages import Message, ToolCall

__all__ = ["LLM", "LLMRequest", "LLMResponse", "TextSink", "ToolSchema", "Usage"]


class ToolSchema(BaseModel):
    """A tool as the model sees it: name, description and JSON schema of its input."""

    name: str
    description: str
    input_schema: dict[str, Any]


class Usage(BaseModel):
    """Token usage of one model call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )


class LLMRequest(BaseModel):
    """Everything one model call needs."""

    instructions: str
    messages: list[Message]
    tools: list[ToolSchema] = Field(default_factory=list)
    session_id: str = ""
    """The session this call serves (adapters may use it for deterministic ids)."""
    run_id: str = ""
    step: int = 0
    """The model step within the turn, from 0."""


class LLMResponse(BaseModel):
    """What one model call produced."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    stop_reason: str = "end_turn"


TextSink = Callable[[str], Awaitable[None]]
"""Receives streamed text deltas while a model call runs (best effort, not durable)."""


@runtime_checkable
class LLM(Protocol):
    """A language model adapter."""

    name: str

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """Run one model call. Raise ``ProviderError`` with a ``provider_*`` code on failure."""
        ...
