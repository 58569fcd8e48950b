"""Shared fixtures: a fresh Postgres database per test, and a SQLite file per test.

Postgres comes from ``HELIX_TEST_PG_URL`` (an admin URL; default the local server's
``postgres`` database). Each test gets its own database, dropped afterwards.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, settings

# Property tests check behaviour, not speed: on a loaded machine (the suite runs in several
# workers) a per-example deadline or a slow-generation check would fail a correct test.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

PG_ADMIN_URL = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")

#: Fixtures of ``tests/support`` that tests of several folders use by name.
pytest_plugins = ["tests.support.time_zone"]


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


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Collect the files marked ``slow`` first, each file's tests kept together and in order.

    The suite hands whole files to its workers (``-n 4 --dist loadfile``), each to the next
    free worker in collection order: a file of several minutes collected last runs alone at
    the end while the other workers wait. Started first, it runs beside the short files.
    """
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)


_exit_status: int | None = None
"""The session's exit status, once ``pytest_sessionfinish`` has run; ``None`` until then."""

LEFTOVER_THREAD_GRACE_SECONDS = float(os.environ.get("HELIX_TEST_THREAD_GRACE_SECONDS", "30"))
"""How long the end of the session waits for threads a test left running."""


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _exit_status
    _exit_status = int(exitstatus)


def _leftover_threads() -> list[threading.Thread]:
    """The threads the interpreter would wait for at exit (non-daemon, still running)."""
    return [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Exit the usual way, unless a thread left running would hold the interpreter.

    Every runtime a test launches is shut down by its fixture, and DBOS's threads end with it,
    so normally no thread is left and pytest exits as it always does, with its own code. Should
    one still run after ``LEFTOVER_THREAD_GRACE_SECONDS`` (a DBOS worker that was mid-operation
    when its test database was dropped retries its connection for ever, with growing sleeps),
    the process leaves at once, naming it, rather than hang.

    That early exit uses the status ``pytest_sessionfinish`` recorded. When configuration or
    session start fails (a malformed option, an INTERNALERROR), pytest skips that hook, and
    nothing here runs: pytest exits the usual way, with its code.
    """
    if _exit_status is None:
        return
    deadline = time.monotonic() + LEFTOVER_THREAD_GRACE_SECONDS
    for thread in _leftover_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = _leftover_threads()
    if not stuck:
        return
    names = ", ".join(t.name for t in stuck)
    print(f"\nthreads still running at the end of the session: {names}", file=sys.stderr)
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


@pytest.fixture(autouse=True)
def _no_service_tag_leaks() -> Iterator[None]:
    """A runtime or router built with ``service_name`` tags every later log event in the
    process; a test that set it must not tag the next test's events."""
    yield
    from helix_dbos.observability.log import set_service_name

    set_service_name(None)
