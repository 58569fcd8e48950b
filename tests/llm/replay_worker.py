"""A child process for the replay test: a real OpenAI-compatible adapter against the test's
fake server; starts one turn, prints its session id once the turn is parked, then waits to be
killed."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pydantic import BaseModel

from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import Agent, define_agent
from helix_dbos.core.tools import define_tool
from helix_dbos.llm import OpenAICompatibleLLM
from helix_dbos.runtime import AgentRuntime


class WeatherIn(BaseModel):
    city: str


class WeatherOut(BaseModel):
    sky: str


def agent(base_url: str) -> Agent:
    """The same agent in the killed process and in the one that recovers it."""
    return define_agent(
        "weather",
        llm=OpenAICompatibleLLM("fake-model", api_key="k", base_url=base_url),
        tools=[define_tool("get_weather", "Weather", WeatherIn, WeatherOut, execute="client")],
    )


def settings(url: str) -> HelixSettings:
    return HelixSettings(database_url=url, executor_id="replay-exec", application_version="r1")


async def main(url: str) -> None:
    runtime = AgentRuntime([agent(os.environ["FAKE_BASE_URL"])], settings(url))
    await runtime.launch()
    handle = await runtime.start("weather", "Weather in Paris?")
    await runtime.wait_for_pending(handle.session_id)
    print(handle.session_id, flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
