"""The real adapters inside the durable runtime, against the local fake provider servers.

A client-tool round trip with each adapter, a 429 retried by the durable model step, and a
400 that fails the turn with its typed code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
from pydantic import BaseModel

from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import Agent, define_agent
from helix_dbos.core.llm import LLM
from helix_dbos.core.tools import define_tool
from helix_dbos.llm import AnthropicLLM, OpenAICompatibleLLM
from helix_dbos.runtime import AgentRuntime

from .fake_servers import (
    FakeServer,
    Recorded,
    Reply,
    anthropic_error,
    anthropic_text,
    anthropic_tool_use,
    openai_error,
    openai_text,
    openai_tool_calls,
)


class WeatherIn(BaseModel):
    city: str


class WeatherOut(BaseModel):
    sky: str
    temp_c: int


get_weather = define_tool(
    "get_weather", "The weather in a city.", WeatherIn, WeatherOut, execute="client"
)


def _openai_answered(request: Recorded) -> bool:
    return bool(request.body["messages"][-1]["role"] == "tool")


def _anthropic_answered(request: Recorded) -> bool:
    last = request.body["messages"][-1]
    return last["role"] == "user" and any(b["type"] == "tool_result" for b in last["content"])


def openai_weather(request: Recorded) -> Reply:
    """Call get_weather for Paris, then answer from its result."""
    if _openai_answered(request):
        return openai_text("It is sunny ", "in Paris.")
    return openai_tool_calls([("call_w1", "get_weather", ['{"city": ', '"Paris"}'])])


def anthropic_weather(request: Recorded) -> Reply:
    """Call get_weather for Paris, then answer from its result."""
    if _anthropic_answered(request):
        return anthropic_text("It is sunny ", "in Paris.")
    return anthropic_tool_use([("toolu_w1", "get_weather", ['{"city": ', '"Paris"}'])])


PROVIDERS: dict[str, tuple[Callable[[FakeServer], LLM], Callable[[Recorded], Reply]]] = {
    "openai": (
        lambda s: OpenAICompatibleLLM("fake-model", api_key="k", base_url=f"{s.url}/v1"),
        openai_weather,
    ),
    "anthropic": (
        lambda s: AnthropicLLM("fake-claude", api_key="k", base_url=s.url),
        anthropic_weather,
    ),
}


# One runtime and one fake server per provider serve the whole module: launching DBOS and
# migrating a database per test would cost more than the tests themselves.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, FakeServer]]:
    with FakeServer(openai_weather) as openai, FakeServer(anthropic_weather) as anthropic:
        yield {"openai": openai, "anthropic": anthropic}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runtime(
    servers: dict[str, FakeServer], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[AgentRuntime]:
    # The adapters are under test here, not the backends, so SQLite keeps this fast.
    path = tmp_path_factory.mktemp("roundtrip") / "helix.sqlite"
    settings = HelixSettings(
        database_url=f"sqlite:///{path}", executor_id="test-exec", application_version="test"
    )
    agents = [weather_agent(name, server) for name, server in servers.items()]
    async with AgentRuntime(agents, settings) as launched:
        yield launched


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(provider: str, servers: dict[str, FakeServer]) -> FakeServer:
    fake = servers[provider]
    # Each test reads only its own requests.
    fake.requests.clear()
    return fake


def weather_agent(provider: str, server: FakeServer) -> Agent:
    return define_agent(
        f"weather_{provider}",
        llm=PROVIDERS[provider][0](server),
        instructions="Answer weather questions with the get_weather tool.",
        tools=[get_weather],
    )


async def test_client_tool_round_trip(
    provider: str, server: FakeServer, runtime: AgentRuntime
) -> None:
    handle = await runtime.start(f"weather_{provider}", "Weather in Paris?")
    [pending] = await runtime.wait_for_pending(handle.session_id)
    call_id = "call_w1" if provider == "openai" else "toolu_w1"
    assert (pending["toolCallId"], pending["toolName"]) == (call_id, "get_weather")
    assert pending["input"] == {"city": "Paris"}

    await runtime.submit_tool_result(
        handle.session_id, call_id, result={"sky": "sunny", "temp_c": 21}
    )
    view = await runtime.wait(handle.session_id)

    assert view["status"] == "completed"
    messages = await runtime.messages(handle.session_id)
    assert messages[-1].role == "assistant"
    assert messages[-1].content == "It is sunny in Paris."
    # The reply streamed into the session's events while the model step ran, then the
    # complete text was recorded durably.
    events = await runtime.events(handle.session_id)
    streamed = "".join(e.data["delta"] for e in events if e.type == "text_delta")
    assert streamed == "It is sunny in Paris."
    types = [e.type for e in events]
    assert types.index("text_delta") < types.index("text")
    first, second = server.bodies
    if provider == "openai":
        assert first["messages"][0] == {
            "role": "system",
            "content": "Answer weather questions with the get_weather tool.",
        }
        assert first["tools"][0]["function"]["name"] == "get_weather"
        assistant, tool = second["messages"][-2:]
        assert assistant["tool_calls"][0]["id"] == call_id
        assert tool["role"] == "tool"
        assert tool["tool_call_id"] == call_id
        assert "sunny" in tool["content"]
    else:
        assert first["system"] == "Answer weather questions with the get_weather tool."
        assert first["tools"][0]["name"] == "get_weather"
        assistant, answer = second["messages"][-2:]
        assert assistant["content"][-1]["type"] == "tool_use"
        assert assistant["content"][-1]["id"] == call_id
        [block] = answer["content"]
        assert (block["type"], block["tool_use_id"]) == ("tool_result", call_id)
        assert "sunny" in block["content"]
        assert "is_error" not in block


async def test_rate_limit_is_retried_by_the_durable_step(
    provider: str, server: FakeServer, runtime: AgentRuntime
) -> None:
    server.enqueue(
        openai_error(429, "Rate limit reached", type="requests")
        if provider == "openai"
        else anthropic_error(429, "rate_limit_error", "Too many requests")
    )
    server.enqueue(openai_text("Hello.") if provider == "openai" else anthropic_text("Hello."))
    handle = await runtime.start(f"weather_{provider}", "Hi")
    view = await runtime.wait(handle.session_id)

    assert view["status"] == "completed"
    # One rejected attempt, then the step's own retry; the SDK itself never retried.
    assert len(server.requests) == 2
    messages = await runtime.messages(handle.session_id)
    assert messages[-1].content == "Hello."


async def test_bad_request_fails_the_turn_typed(
    provider: str, server: FakeServer, runtime: AgentRuntime
) -> None:
    server.enqueue(
        openai_error(400, "Invalid 'messages'")
        if provider == "openai"
        else anthropic_error(400, "invalid_request_error", "messages: invalid")
    )
    handle = await runtime.start(f"weather_{provider}", "Hi")
    view = await runtime.wait(handle.session_id)

    assert view["status"] == "failed"
    error: dict[str, Any] = view["error"]
    assert error["code"] == "provider_bad_request"
    assert error["retryable"] is False
    # Not retryable: exactly one attempt.
    assert len(server.requests) == 1
