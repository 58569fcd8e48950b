"""A real Chromium (the system's ``chromium`` package, driven by Playwright) and real servers.

Each server is its own ``helix-dbos serve`` process on a free port, as a user starts it. The
browser is the system's Chromium: Playwright's own browser download is not used. A missing
Chromium fails the tests (``bash .ci/run`` installs it); it is never a skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Request, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[2]

#: How long a browser action, and an ``expect`` on the page, waits (a loaded machine serves a
#: turn's end seconds late; ``expect``'s own default is 5 s).
TIMEOUT_MS = 30_000
expect.set_options(timeout=TIMEOUT_MS)

#: The session-token secret of the authenticated server.
SECRET = "browser-test-secret-0123456789-abcdef"


def chromium_path() -> str:
    """``HELIX_TEST_CHROMIUM``, else ``chromium`` on PATH."""
    path = os.environ.get("HELIX_TEST_CHROMIUM") or shutil.which("chromium")
    if not path:
        pytest.fail(
            "Chromium is not installed: `apt-get install chromium` (bash .ci/run does it), "
            "or point HELIX_TEST_CHROMIUM at a Chromium binary"
        )
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium (``--no-sandbox``: CI runs as root).

    Module-scoped: Playwright's sync API keeps an event loop running while it is open, and
    the async tests of the next module need the thread's loop to themselves.
    """
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), args=["--no-sandbox"], headless=True
        )
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Visit:
    """A fresh browser context (its own storage) and every URL it requested."""

    context: BrowserContext
    page: Page
    requests: list[str] = field(default_factory=list)

    def foreign_requests(self, base_url: str) -> list[str]:
        """Requests that left the server under test (``data:`` URLs stay in the page)."""
        local = (base_url + "/", "data:", f"blob:{base_url}/")  # a blob of the page stays in it
        return [url for url in self.requests if not url.startswith(local)]


@pytest.fixture
def visit(browser: Browser) -> Iterator[Visit]:
    context = browser.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    seen = Visit(context=context, page=page)

    def record(request: Request) -> None:
        seen.requests.append(request.url)

    context.on("request", record)
    try:
        yield seen
    finally:
        context.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Served:
    """A running ``helix-dbos serve``."""

    base_url: str
    process: subprocess.Popen[bytes]


def start_server(
    workdir: Path, command: list[str], env: dict[str, str], *, port: int | None = None
) -> Served:
    """Run ``command`` (given ``--port``) on ``port`` (default: a free one); returns once it
    answers. Its output is appended to ``workdir/server.log``."""
    port = port or _free_port()
    log = (workdir / "server.log").open("ab")
    process = subprocess.Popen(
        [*command, "--port", str(port)], env=env, cwd=workdir, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        if process.poll() is not None:
            raise AssertionError((workdir / "server.log").read_text())
        try:
            httpx.get(f"{base}/openapi.json", timeout=2).raise_for_status()
            return Served(base_url=base, process=process)
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"{command} did not start"
            time.sleep(0.2)


def server_env(database_url: str, *, secret: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HELIX_AUTH_SECRET"}
    env["HELIX_DATABASE_URL"] = database_url
    # The checkout on the path: a test's own app module (tests.browser....) is importable.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if secret is not None:
        env["HELIX_AUTH_SECRET"] = secret
    return env


def start_serve(workdir: Path, database_url: str, *, secret: str | None) -> Served:
    """``helix-dbos serve`` (the demo agents), with session tokens when given a secret."""
    command = [sys.executable, "-m", "helix_dbos.cli", "serve"]
    if secret is None:
        command.append("--allow-unauthenticated")
    return start_server(workdir, command, server_env(database_url, secret=secret))


def stop_serve(served: Served) -> None:
    served.process.terminate()
    try:
        served.process.wait(30)
    except subprocess.TimeoutExpired:
        served.process.kill()
        served.process.wait(10)
