"""Observability fixtures: real turns on a launched runtime over a fresh Postgres database.

Every test gets its own database, cloned from a template that is migrated once per session
(our tables, DBOS's system tables and its datasource table), so a launch takes ~0.15 s.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helix_dbos.observability.log import reset_event_levels, set_service_name
from helix_dbos.runtime import AgentRuntime

sys.path.insert(0, str(Path(__file__).parent))

from obs_agents import make_agents
from obs_helpers import settings_for

PG_ADMIN_URL = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")

LaunchRuntime = Callable[..., Awaitable[AgentRuntime]]


def _with_db(name: str) -> str:
    return f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"


def _admin(sql: str) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A database with every table migrated, to clone per test."""
    name = f"helix_obs_tpl_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{name}"')

    async def migrate() -> None:
        runtime = AgentRuntime(make_agents(), settings_for(_with_db(name)))
        await runtime.launch()
        await runtime.shutdown()

    try:
        asyncio.run(migrate())
        _admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
        yield name
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_template: str) -> Iterator[str]:
    """A fresh, migrated Postgres database (a clone of the session's template)."""
    name = f"helix_obs_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    try:
        yield _with_db(name)
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(autouse=True)
def _reset_log_config() -> Iterator[None]:
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

    async def make(
        *,
        timeout: float = 30.0,
        fast_timeout: float = 0.4,
        scrubber: Callable[[str], str] | None = None,
        service_name: str | None = None,
        **settings: Any,
    ) -> AgentRuntime:
        runtime = AgentRuntime(
            make_agents(timeout, fast_timeout),
            settings_for(pg_url, **settings),
            scrubber=scrubber,
            service_name=service_name,
        )
        await runtime.launch()
        launched.append(runtime)
        return runtime

    yield make
    for runtime in launched:
        if runtime._ctx is not None:
            await runtime.shutdown()
