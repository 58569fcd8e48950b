"""Observability fixtures: real turns on a launched runtime over a fresh Postgres database.

Every test gets its own database, cloned from a template that is migrated once per session
(our tables and DBOS's system tables), so a launch takes ~0.15 s; the
clones are made ahead of time and dropped afterwards in the background.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from helix_dbos.observability.log import reset_event_levels, set_service_name
from helix_dbos.runtime import AgentRuntime
from tests.observability.obs_agents import make_agents
from tests.observability.obs_helpers import settings_for

PG_ADMIN_URL = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")

LaunchRuntime = Callable[..., Awaitable[AgentRuntime]]


def _with_db(name: str) -> str:
    return f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"


def _admin(sql: str) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


class _Databases:
    """Clones of the template made ahead of time, and dropped after use, off the test's path."""

    def __init__(self, template: str, ahead: int = 2) -> None:
        self.template = template
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="obs-db")
        self.ready: list[Future[str]] = [self.pool.submit(self._clone) for _ in range(ahead)]
        self.dropping: list[Future[None]] = []

    def _clone(self) -> str:
        name = f"helix_obs_{uuid.uuid4().hex[:12]}"
        _admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        return name

    def take(self) -> str:
        ready = self.ready.pop(0)
        self.ready.append(self.pool.submit(self._clone))
        return ready.result()

    def give_back(self, name: str) -> None:
        self.dropping.append(
            self.pool.submit(_admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        )

    def close(self) -> None:
        for ready in self.ready:
            self.give_back(ready.result())
        for dropped in self.dropping:
            dropped.result()
        self.pool.shutdown()


@pytest.fixture(scope="session")
def pg_databases() -> Iterator[_Databases]:
    """Fresh databases cloned from a template migrated once (our tables and DBOS's)."""
    template = f"helix_obs_tpl_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{template}"')

    async def migrate() -> None:
        runtime = AgentRuntime(make_agents(), settings_for(_with_db(template)))
        await runtime.launch()
        await runtime.shutdown()

    databases: _Databases | None = None
    try:
        asyncio.run(migrate())
        _admin(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{template}'"
        )
        databases = _Databases(template)
        yield databases
    finally:
        if databases is not None:
            databases.close()
        _admin(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_databases: _Databases) -> Iterator[str]:
    """A fresh, migrated Postgres database of its own."""
    name = pg_databases.take()
    try:
        yield _with_db(name)
    finally:
        pg_databases.give_back(name)


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
        fast_timeout: float = 2.0,
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
