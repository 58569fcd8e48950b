"""Fixtures for the store tests: migrated databases and stores on them.

Creating a Postgres database costs a few hundred milliseconds on a busy machine, so the store
tests share one migrated database per test session and start each test with every
``__agents_*`` table emptied (``TRUNCATE ... RESTART IDENTITY``). Databases that a module keeps
for itself are cloned from a template migrated once (``CREATE DATABASE ... TEMPLATE``); SQLite
tests copy a migrated file. The migration tests start from the empty databases of ``db_url`` /
``pg_url``.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helix_dbos.store.migrate import upgrade
from helix_dbos.store.schema import metadata
from helix_dbos.store.store import SessionStore
from tests.conftest import PG_ADMIN_URL, create_pg_database, drop_pg_database


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """The name of a Postgres database migrated to head, to clone."""
    url = create_pg_database()
    upgrade(url)
    try:
        yield url.rpartition("/")[2]
    finally:
        drop_pg_database(url)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head, to copy."""
    path = tmp_path_factory.mktemp("template") / "helix.sqlite"
    upgrade(f"sqlite:///{path}")
    return path


def clone_pg_database(template: str) -> str:
    """Create a database as a copy of ``template``; return its URL (drop it when done)."""
    name = f"helix_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"


@pytest.fixture(scope="session")
def pg_shared_url(pg_template: str) -> Iterator[str]:
    """One migrated Postgres database for the store tests of this session."""
    url = clone_pg_database(pg_template)
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        # Durability across a server crash is not what these tests are about.
        conn.execute(f'ALTER DATABASE "{url.rpartition("/")[2]}" SET synchronous_commit = off')
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def migrated_pg_url(pg_shared_url: str) -> str:
    """A Postgres database at head whose tables are empty."""
    tables = ", ".join(f'"{t.name}"' for t in metadata.sorted_tables)
    with psycopg.connect(pg_shared_url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {tables} RESTART IDENTITY")
    return pg_shared_url


@pytest.fixture
def migrated_sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A fresh SQLite file at head."""
    path = tmp_path / "helix.sqlite"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=["postgres", "sqlite"])
def migrated_url(request: pytest.FixtureRequest) -> str:
    """Each backend in turn, at head."""
    name = "migrated_pg_url" if request.param == "postgres" else "migrated_sqlite_url"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture
async def store(migrated_url: str) -> AsyncIterator[SessionStore]:
    """A store on each migrated backend."""
    s = SessionStore.from_url(migrated_url, pool_size=12)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def pg_store(migrated_pg_url: str) -> AsyncIterator[SessionStore]:
    """A store on a migrated Postgres database."""
    s = SessionStore.from_url(migrated_pg_url)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement psycopg's async cursors send while the test runs, as one-line text."""
    seen: list[str] = []
    original = psycopg.AsyncCursor.execute

    async def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(" ".join(str(query).split()))
        return await original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", execute)
    yield seen
