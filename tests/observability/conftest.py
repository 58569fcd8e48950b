"""Observability fixtures: a launched runtime over a fresh Postgres database, real turns."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
import sys
from pathlib import Path
from typing import Any

import pytest

from helix_dbos.config import HelixSettings
from helix_dbos.observability.log import reset_event_levels, set_service_name
from helix_dbos.runtime import AgentRuntime

sys.path.insert(0, str(Path(__file__).parent))

from obs_agents import make_agents  # noqa: E402

LaunchRuntime = Callable[..., Awaitable[AgentRuntime]]


@pytest.fixture(autouse=True)
def _reset_log_config() -> Any:
    yield
    reset_event_levels()
    set_service_name(None)


@pytest.fixture
async def launch(pg_url: str) -> AsyncIterator[LaunchRuntime]:
    """``await launch(**options)``: a launched runtime on this test's Postgres database.

    Options: ``timeout`` / ``fast_timeout`` (the agents' client deadlines), ``scrubber``,
    ``service_name``, and any ``HelixSettings`` field.
    """
    launched: list[AgentRuntime] = []

    async def make(*, timeout: float = 30.0, fast_timeout: float = 0.4,
                   scrubber: Callable[[str], str] | None = None,
                   service_name: str | None = None, **settings: Any) -> AgentRuntime:
        values: dict[str, Any] = {
            "database_url": pg_url, "executor_id": "obs-exec", "application_version": "obs",
        }
        values.update(settings)
        runtime = AgentRuntime(
            make_agents(timeout, fast_timeout), HelixSettings(**values),
            scrubber=scrubber, service_name=service_name,
        )
        await runtime.launch()
        launched.append(runtime)
        return runtime

    yield make
    for runtime in launched:
        if runtime._ctx is not None:
            await runtime.shutdown()
