"""One real uvicorn server for the whole HTTP suite, on a fresh Postgres database.

DBOS is a process singleton (one launched runtime at a time), and launching it on a fresh
database runs every migration, so the suite shares one server: the runtime is launched by the
app's lifespan, exactly as in production, and every test uses its own sessions. The database
is made and dropped like the ``pg_url`` fixture's, for the package instead of one test.

The server runs in a thread with its own event loop; tests talk to it over HTTP with a sync
client. Runtime calls a test needs (a crafted store edit) run on the server's loop, where the
runtime's connections live (``HttpServer.run``).

The app mounts three routers over the same runtime:

* ``/``: unauthenticated (as behind a proxy), submits rate-limited to ``RATE_LIMIT``/min;
* ``/secure``: session tokens (``session_token_auth``);
* ``/verbose``: unauthenticated, verbose validation errors.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import psycopg
import pytest
import uvicorn
from fastapi import FastAPI

from helix_dbos.config import HelixSettings
from helix_dbos.demo import demo_agents
from helix_dbos.http import SessionTokens, create_router, install_error_handlers, lifespan_for
from helix_dbos.runtime import AgentRuntime
from tests.conftest import create_pg_database, drop_pg_database

T = TypeVar("T")

#: The runtime's submit size limit in the suite (small, so 413s are cheap to provoke).
MAX_RESULT_BYTES = 2_000
#: The request-body guard the router derives from it.
BODY_CAP = MAX_RESULT_BYTES * 4
#: Submits per minute per session on the unauthenticated router.
RATE_LIMIT = 8
#: The session-token secret of the ``/secure`` router.
SECRET = "test-secret-for-session-tokens-0123456789"


@dataclass
class HttpServer:
    """The running server: its URL, runtime, loop and database."""

    base_url: str
    runtime: AgentRuntime
    loop: asyncio.AbstractEventLoop
    database_url: str
    tokens: SessionTokens

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 20.0) -> T:
        """Run a coroutine on the server's loop (where the runtime's connections live)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @contextmanager
    def serve_app(self, app: FastAPI) -> Iterator[str]:
        """Serve another app over the suite's runtime, on its loop (its lifespan off: the
        runtime already runs); its URL while the block runs."""
        port = _free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        )
        serving = asyncio.run_coroutine_threadsafe(server.serve(), self.loop)
        deadline = time.monotonic() + 60
        while not server.started:
            assert not serving.done(), serving.result()
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            serving.result(30)

    def count_rows(self) -> dict[str, int]:
        """Rows in the session tables (a refused request must not change them)."""
        sync_url = self.database_url
        with psycopg.connect(sync_url) as conn:
            return {
                table: conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]  # type: ignore[index]
                for table in ("__agents_states", "__agents_messages", "__agents_events")
            }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def build_app(runtime: AgentRuntime, tokens: SessionTokens) -> FastAPI:
    """The suite's app: three routers over one runtime, launched by the lifespan."""
    app = FastAPI(lifespan=lifespan_for(runtime))
    install_error_handlers(app)
    app.include_router(
        create_router(runtime, allow_unauthenticated=True, rate_limit_per_minute=RATE_LIMIT)
    )
    app.include_router(
        create_router(runtime, authenticate=tokens.authenticate, token_issuer=tokens.issue),
        prefix="/secure",
    )
    app.include_router(
        create_router(runtime, allow_unauthenticated=True, verbose_validation_errors=True),
        prefix="/verbose",
    )
    return app


@pytest.fixture(scope="package")
def http_server() -> Iterator[HttpServer]:
    """A launched runtime behind a real uvicorn server on 127.0.0.1."""
    database_url = create_pg_database()
    runtime = AgentRuntime(
        demo_agents(),
        HelixSettings(
            database_url=database_url,
            executor_id="http-tests",
            application_version="test",
            max_result_bytes=MAX_RESULT_BYTES,
        ),
    )
    tokens = SessionTokens(SECRET, ttl_seconds=600)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(build_app(runtime, tokens), host="127.0.0.1", port=port, log_level="warning")
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(
        target=lambda: loop.run_until_complete(server.serve()), name="uvicorn", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            drop_pg_database(database_url)
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield HttpServer(f"http://127.0.0.1:{port}", runtime, loop, database_url, tokens)
    finally:
        server.should_exit = True
        thread.join(30)
        loop.close()
        drop_pg_database(database_url)


@pytest.fixture
def client(http_server: HttpServer) -> Iterator[httpx.Client]:
    """A sync HTTP client on the test server."""
    with httpx.Client(base_url=http_server.base_url, timeout=20.0) as c:
        yield c
