"""Shared fixtures: a fresh Postgres database per test, and a SQLite file per test.

Postgres comes from ``HELIX_TEST_PG_URL`` (an admin URL; default the local server's
``postgres`` database). Each test gets its own database, dropped afterwards.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

PG_ADMIN_URL = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _with_db(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


def create_pg_database() -> str:
    """Create an empty database and return its URL."""
    name = f"helix_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return _with_db(PG_ADMIN_URL, name)


def drop_pg_database(url: str) -> None:
    """Drop a database made by ``create_pg_database``, ending its connections."""
    name = url.rpartition("/")[2]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty Postgres database."""
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite file."""
    return f"sqlite:///{tmp_path / 'helix.sqlite'}"


@pytest.fixture(params=["postgres", "sqlite"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each backend in turn: a fresh Postgres database, then a fresh SQLite file."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'helix.sqlite'}"
        return
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


_exit_status: int | None = None
"""The session's exit status, once ``pytest_sessionfinish`` has run; ``None`` until then."""


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _exit_status
    _exit_status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave as soon as everything is reported.

    DBOS keeps the worker threads of runtimes that earlier tests destroyed; one that was
    mid-operation when its test database was dropped retries its connection with growing
    sleeps, and the interpreter would join it at exit for minutes. Nothing is left to run.

    Only after ``pytest_sessionfinish`` has recorded the real status: when configuration or
    session start fails (a malformed option, an INTERNALERROR), pytest skips it, and leaving
    here would turn that failure into exit 0. Then pytest exits the usual way, with its code.
    """
    if _exit_status is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status)


_CONFIGURED_LOGGERS = ("helix_dbos", "dbos", "uvicorn", "uvicorn.error", "uvicorn.access")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """``helix-dbos serve`` configures process-wide loggers: put them back afterwards."""
    saved = {}
    for name in _CONFIGURED_LOGGERS:
        log = logging.getLogger(name)
        saved[name] = (list(log.handlers), log.propagate, log.level)
    yield
    for name, (handlers, propagate, level) in saved.items():
        log = logging.getLogger(name)
        log.handlers = handlers
        log.propagate = propagate
        log.setLevel(level)
