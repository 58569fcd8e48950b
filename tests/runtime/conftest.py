"""Runtime fixtures: a launched AgentRuntime on a fresh database (Postgres and SQLite)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import pytest

from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import Agent
from helix_dbos.runtime import AgentRuntime

MakeRuntime = Callable[..., Awaitable[AgentRuntime]]


@pytest.fixture
async def make_runtime(db_url: str) -> AsyncIterator[MakeRuntime]:
    """``await make_runtime(agents, **settings)``: a launched runtime on this test's database."""
    launched: list[AgentRuntime] = []

    async def make(agents: Iterable[Agent], **settings: Any) -> AgentRuntime:
        values: dict[str, Any] = {
            "database_url": db_url,
            "executor_id": "test-exec",
            "application_version": "test",
        }
        values.update(settings)
        runtime = AgentRuntime(agents, HelixSettings(**values))
        await runtime.launch()
        launched.append(runtime)
        return runtime

    yield make
    for runtime in launched:
        await runtime.shutdown()
