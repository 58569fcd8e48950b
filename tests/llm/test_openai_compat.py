"""OpenAICompatibleLLM against a local fake Chat Completions server (real HTTP and SSE)."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from helix_dbos.core.llm import LLMRequest, ToolSchema
from helix_dbos.core.messages import Message, ToolCall
from helix_dbos.errors import ConfigError, ProviderError
from helix_dbos.llm.openai_compat import OpenAICompatibleLLM

from .fake_servers import (
    FakeServer,
    Reply,
    openai_chunk,
    openai_error,
    openai_stream,
    openai_text,
    openai_tool_calls,
    openai_usage,
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


def make_llm(server: FakeServer, **kwargs: Any) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(
        "fake-model", api_key="sk-test", base_url=f"{server.url}/v1", **kwargs
    )


def ask(text: str = "Hi", **kwargs: Any) -> LLMRequest:
    return LLMRequest(
        instructions="You are terse.", messages=[Message(role="user", content=text)], **kwargs
    )


class Deltas:
    def __init__(self) -> None:
        self.items: list[str] = []

    async def __call__(self, delta: str) -> None:
        self.items.append(delta)


async def test_text_reply_streams_deltas_and_maps_usage(server: FakeServer) -> None:
    server.enqueue(openai_text("Hel", "lo", " there", usage=openai_usage(30, 7, cached=12)))
    deltas = Deltas()

    response = await make_llm(server).complete(ask(), deltas)

    assert deltas.items == ["Hel", "lo", " there"]
    assert response.text == "Hello there"
    assert response.tool_calls == []
    assert response.stop_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (30, 7)
    assert response.usage.cached_tokens == 12
    [request] = server.requests
    assert request.method == "POST"
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    body = request.body
    assert body["model"] == "fake-model"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert "tools" not in body
    assert "max_tokens" not in body


async def test_instructions_become_the_first_system_message(server: FakeServer) -> None:
    server.enqueue(openai_text("ok"))
    request = LLMRequest(
        instructions="Be brief.",
        messages=[
            Message(role="user", content="one"),
            Message(role="assistant", content="two"),
            Message(role="user", content="three"),
        ],
    )

    await make_llm(server, max_tokens=64).complete(request)

    body = server.bodies[0]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
    ]
    assert body["max_tokens"] == 64


async def test_tool_definitions_are_function_tools(server: FakeServer) -> None:
    server.enqueue(openai_text("ok"))

    await make_llm(server).complete(ask(tools=[WEATHER]))

    assert server.bodies[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER.input_schema,
            },
        }
    ]


async def test_tool_calls_are_assembled_from_deltas(server: FakeServer) -> None:
    server.enqueue(
        openai_tool_calls(
            [
                ("call_abc", "get_weather", ['{"ci', 'ty": "Par', 'is"}']),
                ("call_def", "get_weather", ['{"city": "Oslo"}']),
            ],
            text="Checking.",
            usage=openai_usage(40, 15),
        )
    )
    deltas = Deltas()

    response = await make_llm(server).complete(ask(tools=[WEATHER]), deltas)

    assert response.tool_calls == [
        ToolCall(id="call_abc", name="get_weather", input={"city": "Paris"}),
        ToolCall(id="call_def", name="get_weather", input={"city": "Oslo"}),
    ]
    assert response.text == "Checking."
    assert deltas.items == ["Checking."]
    assert response.stop_reason == "tool_use"
    assert response.usage.input_tokens == 40


async def test_tool_results_are_sent_back_paired_with_their_calls(server: FakeServer) -> None:
    server.enqueue(openai_text("Paris is sunny; Oslo failed."))
    request = LLMRequest(
        instructions="",
        messages=[
            Message(role="user", content="Weather?"),
            Message(
                role="assistant",
                tool_calls=[
                    ToolCall(id="call_abc", name="get_weather", input={"city": "Paris"}),
                    ToolCall(id="call_def", name="get_weather", input={"city": "Oslo"}),
                ],
            ),
            Message(
                role="tool",
                tool_call_id="call_abc",
                tool_name="get_weather",
                content='{"sky": "sunny"}',
                result={"sky": "sunny"},
            ),
            Message(
                role="tool",
                tool_call_id="call_def",
                tool_name="get_weather",
                content="The client did not answer in time",
                is_error=True,
                error_code="client_tool_timeout",
            ),
        ],
        tools=[WEATHER],
    )

    await make_llm(server).complete(request)

    messages = server.bodies[0]["messages"]
    # No instructions: no system message at all.
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assistant = messages[1]
    assert assistant["content"] is None
    assert [(c["id"], c["type"], c["function"]["name"]) for c in assistant["tool_calls"]] == [
        ("call_abc", "function", "get_weather"),
        ("call_def", "function", "get_weather"),
    ]
    # Arguments travel as a JSON string, as the API documents.
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "call_abc",
        "content": '{"sky": "sunny"}',
    }
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "call_def",
        "content": "The client did not answer in time",
    }


async def test_tool_result_without_text_falls_back_to_json(server: FakeServer) -> None:
    server.enqueue(openai_text("ok"))
    request = LLMRequest(
        instructions="",
        messages=[
            Message(role="user", content="x"),
            Message(role="assistant", tool_calls=[ToolCall(id="c1", name="t", input={})]),
            Message(role="tool", tool_call_id="c1", result={"n": 1}),
        ],
    )

    await make_llm(server).complete(request)

    assert server.bodies[0]["messages"][2]["content"] == '{"n": 1}'


async def test_invalid_argument_json_is_kept_raw(server: FakeServer) -> None:
    server.enqueue(openai_tool_calls([("call_x", "get_weather", ['{"city": "Pa'])]))

    response = await make_llm(server).complete(ask(tools=[WEATHER]))

    assert response.tool_calls[0].input == {"_raw": '{"city": "Pa'}


async def test_missing_call_id_gets_a_deterministic_one(server: FakeServer) -> None:
    frames = openai_stream(
        [
            openai_chunk(
                {"tool_calls": [{"index": 0, "function": {"name": "t", "arguments": "{}"}}]}
            ),
            openai_chunk({}, "tool_calls"),
        ]
    )
    server.enqueue(Reply(frames=frames), Reply(frames=frames))
    request = ask(session_id="s1", run_id="r1", step=2)

    first = await make_llm(server).complete(request)
    second = await make_llm(server).complete(request)

    assert first.tool_calls[0].id.startswith("call_")
    assert first.tool_calls[0].id == second.tool_calls[0].id


@pytest.mark.parametrize(
    ("reply", "code", "retryable"),
    [
        (openai_error(429, "Rate limit reached", type="requests"), "provider_rate_limit", True),
        (
            openai_error(429, "You exceeded your quota", code="insufficient_quota"),
            "provider_rate_limit",
            False,
        ),
        (openai_error(400, "Invalid 'messages'"), "provider_bad_request", False),
        (
            openai_error(
                400,
                "This model's maximum context length is 128000 tokens.",
                code="context_length_exceeded",
            ),
            "provider_context_too_long",
            False,
        ),
        (
            # A compatible server that words it without a code.
            openai_error(400, "This model's maximum context length is 4096 tokens."),
            "provider_context_too_long",
            False,
        ),
        (openai_error(401, "Incorrect API key", code="invalid_api_key"), "provider_auth", False),
        (openai_error(403, "Forbidden"), "provider_auth", False),
        (openai_error(404, "The model does not exist"), "provider_bad_request", False),
        (openai_error(500, "Internal error", type="server_error"), "provider_overloaded", True),
        (openai_error(502, "Bad gateway"), "provider_overloaded", True),
        (openai_error(503, "Service unavailable"), "provider_overloaded", True),
        (openai_error(504, "Gateway timeout"), "provider_overloaded", True),
        (openai_error(529, "Overloaded"), "provider_overloaded", True),
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


async def test_an_injected_client_has_its_retries_turned_off(server: FakeServer) -> None:
    import openai

    client = openai.AsyncOpenAI(api_key="sk-test", base_url=f"{server.url}/v1", max_retries=3)
    server.enqueue(openai_error(503, "busy"), openai_text("late"))

    with pytest.raises(ProviderError) as info:
        await OpenAICompatibleLLM("fake-model", client=client).complete(ask())

    assert info.value.code == "provider_overloaded"
    assert len(server.requests) == 1


async def test_mid_stream_disconnect_is_retryable(server: FakeServer) -> None:
    reply = openai_text("one", "two", "three", "four")
    reply.disconnect_after = 3
    server.enqueue(reply)
    deltas = Deltas()

    with pytest.raises(ProviderError) as info:
        await make_llm(server).complete(ask(), deltas)

    assert info.value.code == "provider_timeout"
    assert info.value.retryable is True
    assert deltas.items == ["one", "two"]


async def test_stream_that_ends_without_a_finish_reason_is_retryable(
    server: FakeServer,
) -> None:
    frames = openai_stream([openai_chunk({"content": "half an ans"})], done=False)
    server.enqueue(Reply(frames=frames))

    with pytest.raises(ProviderError) as info:
        await make_llm(server).complete(ask())

    assert (info.value.code, info.value.retryable) == ("provider_timeout", True)


async def test_error_event_inside_the_stream_is_mapped(server: FakeServer) -> None:
    frames = [
        sse(openai_chunk({"content": "par"})),
        sse({"error": {"message": "The server had an error", "type": "server_error"}}),
    ]
    server.enqueue(Reply(frames=frames))

    with pytest.raises(ProviderError) as info:
        await make_llm(server).complete(ask())

    assert info.value.retryable is True
    assert info.value.code == "provider_overloaded"


async def test_read_timeout_is_retryable(server: FakeServer) -> None:
    reply = openai_text("slow")
    reply.delay = 1.5
    server.enqueue(reply)

    with pytest.raises(ProviderError) as info:
        await make_llm(server, timeout=0.3).complete(ask())

    assert (info.value.code, info.value.retryable) == ("provider_timeout", True)


async def test_refused_connection_is_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = OpenAICompatibleLLM("m", api_key="k", base_url=f"http://127.0.0.1:{port}/v1")

    with pytest.raises(ProviderError) as info:
        await llm.complete(ask())

    assert (info.value.code, info.value.retryable) == ("provider_timeout", True)


async def test_a_failing_text_sink_is_not_a_provider_error(server: FakeServer) -> None:
    server.enqueue(openai_text("a", "b"))

    async def sink(delta: str) -> None:
        raise ConnectionResetError("the browser went away")

    with pytest.raises(ConnectionResetError):
        await make_llm(server).complete(ask(), sink)


def test_missing_sdk_is_a_config_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)

    with pytest.raises(ConfigError, match=r"pip install 'helix-dbos\[openai\]'"):
        OpenAICompatibleLLM("gpt-4o-mini", api_key="k")


def test_missing_key_is_a_config_error_unless_a_base_url_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAICompatibleLLM("gpt-4o-mini")
    local = OpenAICompatibleLLM("llama3.1", base_url="http://127.0.0.1:1/v1")
    assert local.name == "openai:llama3.1"


def test_one_adapter_serves_successive_event_loops(server: FakeServer) -> None:
    # The SDK's pooled connections belong to the loop that opened them; an adapter defined
    # once (at import time, say) must still work from the next loop.
    llm = make_llm(server)
    for word in ("one", "two"):
        server.enqueue(openai_text(word))
        assert asyncio.run(llm.complete(ask())).text == word
