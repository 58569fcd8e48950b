"""What the SDK adapters share: the client, one streamed call, failures as ``ProviderError``.

``StreamingAdapter`` is the skeleton of ``OpenAICompatibleLLM`` and ``AnthropicLLM``: the SDK
imported when an adapter is constructed (a missing extra is a ``ConfigError`` naming it), one
SDK client per event loop with the SDK's retries off, and ``complete``: open the stream, fold
its events into an ``LLMResponse`` while text deltas go to ``on_text``, close the stream, and
turn SDK and network failures into ``ProviderError`` (``_errors.py``). An adapter keeps what is
its provider's own: the request it sends, the assembler of its stream's events, and which of
its SDK's exceptions mean what.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ..core.llm import LLMRequest, LLMResponse, TextSink
from ..core.messages import Message
from ..errors import ConfigError, ProviderError
from ._clients import PerLoopClients, sdk_client_factory
from ._errors import is_transport_error, transport_error

__all__ = [
    "RAW_ARGUMENTS_KEY",
    "Assembler",
    "SdkStream",
    "StreamingAdapter",
    "parse_arguments",
    "tool_text",
]

#: Tool arguments that are not a JSON object arrive as ``{RAW_ARGUMENTS_KEY: "<the text>"}``.
RAW_ARGUMENTS_KEY = "_raw"

C = TypeVar("C")
E = TypeVar("E")
E_co = TypeVar("E_co", covariant=True)
E_contra = TypeVar("E_contra", contravariant=True)


class SdkStream(Protocol[E_co]):
    """A streamed SDK response: its events, and closing it."""

    def __aiter__(self) -> AsyncIterator[E_co]: ...

    async def close(self) -> None: ...


class Assembler(Protocol[E_contra]):
    """Folds a provider's stream events into one ``LLMResponse``."""

    def add(self, event: E_contra) -> str:
        """Take one event; return its text delta ("" if none)."""
        ...

    def response(self) -> LLMResponse:
        """The assembled answer (``ProviderError`` for a stream that did not finish)."""
        ...


class StreamingAdapter(ABC, Generic[C, E]):
    """An ``LLM`` over a provider SDK whose calls stream events of type ``E``.

    A subclass names its provider in the class variables and implements ``_sdk_class``,
    ``_open``, ``_assembler`` and ``_map_sdk_error``.
    """

    #: The adapter's name in configuration errors (``OpenAICompatibleLLM``).
    label: ClassVar[str]
    #: The provider's name in ``ProviderError`` messages (``OpenAI``).
    provider: ClassVar[str]
    #: The SDK's package, and the extra that installs it.
    package: ClassVar[str]
    #: The prefix of ``name``: ``openai`` in ``openai:gpt-4o-mini``.
    scheme: ClassVar[str]
    #: The environment variables read when no key or endpoint is given.
    key_env: ClassVar[str]
    url_env: ClassVar[str]

    name: str
    model: str

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None,
        base_url: str | None,
        timeout: float,
        client: C | None,
    ) -> None:
        try:
            sdk_class = self._sdk_class()
        except ImportError as exc:
            raise ConfigError(
                f"{self.label} needs the {self.package} package: "
                f"pip install 'helix-dbos[{self.package}]'"
            ) from exc
        if not model:
            raise ConfigError(f"{self.label} needs a model name")
        self._check_options()
        self.name = f"{self.scheme}:{model}"
        self.model = model
        self._clients: PerLoopClients[C] = PerLoopClients(
            sdk_client_factory(
                sdk_class,
                injected=client,
                api_key=api_key,
                base_url=base_url,
                key_env=self.key_env,
                url_env=self.url_env,
                timeout=timeout,
                label=self.label,
            )
        )

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """Run one streamed call.

        Args:
            request: instructions, conversation and tools.
            on_text: receives each text delta as it arrives.

        Returns:
            The text, the tool calls (with the provider's ids) and the token usage.

        Raises:
            ProviderError: with a ``provider_*`` code; ``retryable`` says whether the step may
                run it again.
        """
        try:
            stream = await self._open(self._clients.get(), request)
        except Exception as exc:
            mapped = self._map_error(exc)
            if mapped is None:
                raise
            raise mapped from exc
        assembler = self._assembler(request)
        try:
            async with aclosing(self._events(stream)) as events:
                async for event in events:
                    delta = assembler.add(event)
                    # Outside the mapping on purpose: a failing sink is the caller's error,
                    # not the provider's.
                    if delta and on_text is not None:
                        await on_text(delta)
        finally:
            await stream.close()
        return assembler.response()

    async def _events(self, stream: SdkStream[E]) -> AsyncGenerator[E]:
        """The stream's events, with SDK and network failures turned into ``ProviderError``."""
        try:
            async for event in stream:
                yield event
        except Exception as exc:
            mapped = self._map_error(exc)
            if mapped is None:
                raise
            raise mapped from exc

    def _map_error(self, exc: Exception) -> ProviderError | None:
        """The ``ProviderError`` for an SDK or network failure; None for anything else."""
        if isinstance(exc, ProviderError):
            return exc
        mapped = self._map_sdk_error(exc)
        if mapped is not None:
            return mapped
        if is_transport_error(exc):
            return transport_error(self.provider, exc)
        return None

    # -- what each provider supplies ------------------------------------------------------

    @abstractmethod
    def _sdk_class(self) -> Callable[..., C]:
        """The SDK's async client class, imported now (``ImportError`` without the extra)."""

    def _check_options(self) -> None:
        """Refuse the provider's own options (``ConfigError``); called after the model name
        is checked and before a client is configured."""

    @abstractmethod
    async def _open(self, client: C, request: LLMRequest) -> SdkStream[E]:
        """Send ``request`` as the provider's streamed call; its stream of events."""

    @abstractmethod
    def _assembler(self, request: LLMRequest) -> Assembler[E]:
        """A new assembler for the events of one call of ``request``."""

    @abstractmethod
    def _map_sdk_error(self, exc: Exception) -> ProviderError | None:
        """The ``ProviderError`` for one of the SDK's own exceptions; None for any other."""


def tool_text(msg: Message) -> str:
    """A tool result's text for the provider: ``content`` (the result as the model should
    read it), else the error code or the JSON result, so the model is never left guessing."""
    if msg.content:
        return msg.content
    if msg.is_error:
        return msg.error_code or "The tool call failed"
    return json.dumps(msg.result) if msg.result is not None else ""


def parse_arguments(raw: str, empty: dict[str, Any] | None = None) -> dict[str, Any]:
    """A tool call's streamed arguments as a JSON object (``empty``, else ``{}``, when none
    were streamed).

    Arguments that are not a JSON object (truncated by ``max_tokens``, or malformed) are kept
    as ``{"_raw": text}`` rather than failing the call: the tool's input validation then
    rejects them and the model sees a failed tool result it can correct.
    """
    if not raw.strip():
        return {} if empty is None else empty
    try:
        value = json.loads(raw)
    except ValueError:
        return {RAW_ARGUMENTS_KEY: raw}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS_KEY: raw}
