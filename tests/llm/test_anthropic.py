"""AnthropicLLM against a local fake Messages API server (real HTTP and SSE)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from helix_dbos.core.llm import LLMRequest, ToolSchema
from helix_dbos.core.messages import Message, ToolCall
from helix_dbos.errors import ConfigError, ProviderError
from helix_dbos.llm.anthropic import AnthropicLLM

from .fake_servers import (
    FakeServer,
    Reply,
    anthropic_error,
    anthropic_stream,
    anthropic_text,
    anthropic_tool_use,
    sse,
)

WEATHER = ToolSchema(
    name="get_weather",
    description="The weather in a city.",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


def make_llm(server: FakeServer, **kwargs: Any) -> AnthropicLLM:
    return AnthropicLLM("fake-claude", api_key="sk-ant-test", base_url=server.url, **kwargs)


def ask(text: str = "Hi", **kwargs: Any) -> LLMRequest:
    return LLMRequest(
        instructions="You are terse.", messages=[Message(role="user", content=text)], **kwargs
    )


class Deltas:
    def __init__(self) -> None:
        self.items: list[str] = []

    async def __call__(self, delta: str) -> None:
        self.items.append(delta)


async def test_text_reply_streams_deltas(server: FakeServer) -> None:
    server.enqueue(anthropic_text("Hel", "lo", " there"))
    deltas = Deltas()

    response = await make_llm(server, max_tokens=256).complete(ask(), deltas)

    assert deltas.items == ["Hel", "lo", " there"]
    assert response.text == "Hello there"
    assert response.tool_calls == []
    assert response.stop_reason == "end_turn"
    [request] = server.requests
    assert request.path == "/v1/messages"
    # SDK releases differ in the header that carries the key.
    auth = request.headers.get("authorization", "").removeprefix("Bearer ")
    assert "sk-ant-test" in (request.headers.get("x-api-key"), auth)
    assert "anthropic-version" in request.headers
    body = request.body
    assert body["model"] == "fake-claude"
    assert body["max_tokens"] == 256
    assert body["stream"] is True
    assert "tools" not in body


async def test_usage_counts_cache_reads_as_cached_input(server: FakeServer) -> None:
    server.enqueue(
        Reply(
            frames=anthropic_stream(
                [{"type": "text", "pieces": ["ok"]}],
                usage={
                    "input_tokens": 20,
                    "cache_read_input_tokens": 300,
                    "cache_creation_input_tokens": 50,
                },
                output_tokens=9,
            )
        )
    )

    response = await make_llm(server).complete(ask())

    # Every prompt token counts as input, as with OpenAI; cache reads are part of it.
    assert response.usage.input_tokens == 370
    assert response.usage.cached_tokens == 300
    assert response.usage.output_tokens == 9


async def test_instructions_and_system_messages_go_to_top_level_system(
    server: FakeServer,
) -> None:
    server.enqueue(anthropic_text("ok"))
    request = LLMRequest(
        instructions="Be brief.",
        messages=[
            Message(role="user", content="one"),
            Message(role="system", content="The user is an admin."),
            Message(role="user", content="two"),
        ],
    )

    await make_llm(server).complete(request)

    body = server.bodies[0]
    assert body["system"] == "Be brief.\n\nThe user is an admin."
    assert all(m["role"] != "system" for m in body["messages"])
    # The two user messages around the system one merge: roles must alternate.
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        }
    ]


async def test_no_instructions_sends_no_system(server: FakeServer) -> None:
    server.enqueue(anthropic_text("ok"))

    await make_llm(server).complete(
        LLMRequest(instructions="", messages=[Message(role="user", content="x")])
    )

    assert "system" not in server.bodies[0]


async def test_tool_definitions_shape(server: FakeServer) -> None:
    server.enqueue(anthropic_text("ok"))

    await make_llm(server).complete(ask(tools=[WEATHER]))

    assert server.bodies[0]["tools"] == [
        {
            "name": "get_weather",
            "description": "The weather in a city.",
            "input_schema": WEATHER.input_schema,
        }
    ]


async def test_tool_use_is_parsed_with_ids_and_json_input(server: FakeServer) -> None:
    server.enqueue(
        anthropic_tool_use(
            [
                ("toolu_01", "get_weather", ['{"ci', 'ty": "Pa', 'ris"}']),
                ("toolu_02", "get_weather", ['{"city": "Oslo"}']),
                ("toolu_03", "list_cities", []),
            ],
            text="Let me check.",
        )
    )
    deltas = Deltas()

    response = await make_llm(server).complete(ask(tools=[WEATHER]), deltas)

    assert response.tool_calls == [
        ToolCall(id="toolu_01", name="get_weather", input={"city": "Paris"}),
        ToolCall(id="toolu_02", name="get_weather", input={"city": "Oslo"}),
        ToolCall(id="toolu_03", name="list_cities", input={}),
    ]
    assert response.text == "Let me check."
    assert deltas.items == ["Let me check."]
    assert response.stop_reason == "tool_use"


async def test_tool_results_go_in_one_user_message_after_their_calls(
    server: FakeServer,
) -> None:
    server.enqueue(anthropic_text("Paris is sunny; Oslo failed."))
    request = LLMRequest(
        instructions="Help.",
        messages=[
            Message(role="user", content="Weather?"),
            Message(
                role="assistant",
                content="Checking both.",
                tool_calls=[
                    ToolCall(id="toolu_01", name="get_weather", input={"city": "Paris"}),
                    ToolCall(id="toolu_02", name="get_weather", input={"city": "Oslo"}),
                ],
            ),
            Message(
                role="tool",
                tool_call_id="toolu_01",
                tool_name="get_weather",
                content='{"sky": "sunny"}',
                result={"sky": "sunny"},
            ),
            Message(
                role="tool",
                tool_call_id="toolu_02",
                tool_name="get_weather",
                content="The client did not answer in time",
                is_error=True,
                error_code="client_tool_timeout",
            ),
            Message(role="user", content="And tomorrow?"),
        ],
        tools=[WEATHER],
    )

    await make_llm(server).complete(request)

    messages = server.bodies[0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "text", "text": "Checking both."},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_02", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": '{"sky": "sunny"}'},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_02",
            "content": "The client did not answer in time",
            "is_error": True,
        },
        {"type": "text", "text": "And tomorrow?"},
    ]


async def test_invalid_input_json_is_kept_raw(server: FakeServer) -> None:
    reply = Reply(
        frames=anthropic_stream(
            [{"type": "tool_use", "id": "toolu_9", "name": "t", "pieces": ['{"a": ']}],
            stop_reason="max_tokens",
        )
    )
    server.enqueue(reply)

    response = await make_llm(server).complete(ask())

    assert response.tool_calls[0].input == {"_raw": '{"a": '}
    assert response.stop_reason == "max_tokens"


@pytest.mark.parametrize(
    ("reply", "code", "retryable"),
    [
        (
            anthropic_error(429, "rate_limit_error", "Number of requests exceeded"),
            "provider_rate_limit",
            True,
        ),
        (
            anthropic_error(400, "invalid_request_error", "messages: roles must alternate"),
            "provider_bad_request",
            False,
        ),
        (
            anthropic_error(
                400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
            ),
            "provider_context_too_long",
            False,
        ),
        (
            anthropic_error(
                400,
                "invalid_request_error",
                "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000",
            ),
            "provider_context_too_long",
            False,
        ),
        (
            anthropic_error(413, "request_too_large", "Request exceeds the maximum size"),
            "provider_context_too_long",
            False,
        ),
        (
            anthropic_error(401, "authentication_error", "invalid x-api-key"),
            "provider_auth",
            False,
        ),
        (anthropic_error(403, "permission_error", "no access"), "provider_auth", False),
        (anthropic_error(404, "not_found_error", "model: nope"), "provider_bad_request", False),
        (anthropic_error(500, "api_error", "Internal server error"), "provider_overloaded", True),
        (anthropic_error(503, "api_error", "Unavailable"), "provider_overloaded", True),
        (anthropic_error(529, "overloaded_error", "Overloaded"), "provider_overloaded", True),
    ],
)
async def test_http_errors_map_to_provider_codes(
    server: FakeServer, reply: Reply, code: str, retryable: bool
) -> None:
    server.enqueue(reply)

    with pytest.raises(ProviderError) as info:
        await make_llm(server).complete(ask())

    assert info.value.code == code
    assert info.value.retryable is retryable
    assert info.value.details["providerStatus"] == reply.status
    # The SDK's own retries are off: the durable step owns retrying.
    assert len(server.requests) == 1


async def test_overloaded_error_event_inside_the_stream_is_retryable(server: FakeServer) -> None:
    frames = anthropic_stream([{"type": "text", "pieces": ["par", "tial"]}], stop=False)[:4]
    frames.append(
        sse(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "error",
        )
    )
    server.enqueue(Reply(frames=frames))

    with pytest.raises(ProviderError) as info:
        await make_llm(server).complete(ask())

    assert (info.value.code, info.value.retryable) == ("provider_overloaded", True)
    assert info.value.details["providerStatus"] is None


async def test_mid_stream_disconnect_is_retryable(server: FakeServer) -> None:
    reply = anthropic_text("one", "two", "three", "four")
    # message_start, ping, block start, then two deltas: the connection drops mid-answer.
    reply.disconnect_after = 5
    server.enqueue(reply)
    deltas = Deltas()

    with pytest.raises(ProviderError) as info:
        await make_llm(server).complete(ask(), deltas)

    assert (info.value.code, info.value.retryable) == ("provider_timeout", True)
    assert deltas.items == ["one", "two"]


async def test_stream_without_message_stop_is_retryable(server: FakeServer) -> None:
    frames = anthropic_stream([{"type": "text", "pieces": ["cut"]}], stop=False)
    server.enqueue(Reply(frames=frames))

    with pytest.raises(ProviderError) as info:
        await make_llm(server).complete(ask())

    assert (info.value.code, info.value.retryable) == ("provider_timeout", True)


async def test_read_timeout_is_retryable(server: FakeServer) -> None:
    reply = anthropic_text("slow")
    reply.delay = 1.5
    server.enqueue(reply)

    with pytest.raises(ProviderError) as info:
        await make_llm(server, timeout=0.3).complete(ask())

    assert (info.value.code, info.value.retryable) == ("provider_timeout", True)


async def test_an_injected_client_has_its_retries_turned_off(server: FakeServer) -> None:
    import anthropic

    client = anthropic.AsyncAnthropic(api_key="k", base_url=server.url, max_retries=3)
    server.enqueue(anthropic_error(529, "overloaded_error", "Overloaded"), anthropic_text("x"))

    with pytest.raises(ProviderError):
        await AnthropicLLM("fake-claude", client=client).complete(ask())

    assert len(server.requests) == 1


async def test_a_failing_text_sink_is_not_a_provider_error(server: FakeServer) -> None:
    server.enqueue(anthropic_text("a", "b"))

    async def sink(delta: str) -> None:
        raise ConnectionResetError("the browser went away")

    with pytest.raises(ConnectionResetError):
        await make_llm(server).complete(ask(), sink)


def test_missing_sdk_is_a_config_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)

    with pytest.raises(ConfigError, match=r"pip install 'helix-dbos\[anthropic\]'"):
        AnthropicLLM("claude-x", api_key="k")


def test_missing_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)

    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        AnthropicLLM("claude-x")


def test_one_adapter_serves_successive_event_loops(server: FakeServer) -> None:
    # The SDK's pooled connections belong to the loop that opened them; an adapter defined
    # once (at import time, say) must still work from the next loop.
    llm = make_llm(server)
    for word in ("one", "two"):
        server.enqueue(anthropic_text(word))
        assert asyncio.run(llm.complete(ask())).text == word
