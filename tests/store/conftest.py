"""Fixtures for the store tests: migrated databases and stores on them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from helix_dbos.store.migrate import upgrade
from helix_dbos.store.store import SessionStore


@pytest.fixture
def migrated_url(db_url: str) -> str:
    """Each backend, migrated to head."""
    upgrade(db_url)
    return db_url


@pytest.fixture
def migrated_pg_url(pg_url: str) -> str:
    """A fresh Postgres database, migrated to head."""
    upgrade(pg_url)
    return pg_url


@pytest.fixture
def migrated_sqlite_url(sqlite_url: str) -> str:
    """A fresh SQLite file, migrated to head."""
    upgrade(sqlite_url)
    return sqlite_url


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
