"""Run the programs the docs show as a reader would: copied verbatim into a file, then run.

``python_blocks`` finds a page's Python blocks with the heading each one sits under;
``served`` writes a block as ``app.py`` and serves it with ``python -m uvicorn app:app`` (as
the docs say to run it) on a free port and a fresh SQLite file, and stops it with SIGINT, so
the server's output, shutdown included, can be read afterwards.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.http.conftest import _free_port

ROOT = Path(__file__).resolve().parents[1]
#: A session-token secret for the programs that read ``HELIX_AUTH_SECRET``.
SECRET = "doc-snippet-secret-0123456789abcdef0123456789"
#: How long a program may take to serve its first request (imports, migrations, DBOS launch).
START_TIMEOUT = 60.0

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_HEADING = re.compile(r"^#+ (.+)$", re.M)


def python_blocks(page: Path) -> list[tuple[str, str]]:
    """``(heading, code)`` of every Python block of ``page``, in order; ``heading`` is the
    title of the last heading above the block."""
    text = page.read_text()
    out = []
    for block in _BLOCK.finditer(text):
        headings = _HEADING.findall(text, 0, block.start())
        out.append((headings[-1] if headings else "", block.group(1)))
    return out


def block_under(page: Path, heading: str) -> str:
    """The one Python block under ``heading`` of ``page``."""
    (code,) = [code for title, code in python_blocks(page) if title == heading]
    return code


def program_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a docs program: no ``HELIX_*`` or ``DBOS_*`` of the caller's, a fresh
    SQLite file, the session-token secret, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELIX_", "DBOS_"))}
    env["HELIX_DATABASE_URL"] = f"sqlite:///{tmp_path / 'app.sqlite'}"
    env["HELIX_AUTH_SECRET"] = SECRET
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@dataclass
class Served:
    """A docs program served by uvicorn: its client, and its output once it has stopped."""

    client: httpx.Client
    log: Path
    process: subprocess.Popen[bytes]

    def output(self) -> str:
        return self.log.read_text()


@contextmanager
def served(code: str, tmp_path: Path, **env: str) -> Iterator[Served]:
    """Serve ``code`` as ``app.py`` with ``python -m uvicorn app:app`` (``env``: more
    environment variables); stop it with SIGINT (Ctrl+C) on exit and check that it stopped
    cleanly."""
    (tmp_path / "app.py").write_text(code)
    port = _free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)],
            cwd=tmp_path,
            env=program_env(tmp_path, **env),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20.0) as client:
            _wait_until_serving(client, process, log)
            yield Served(client, log, process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    assert process.returncode == 0, log.read_text()


def _wait_until_serving(client: httpx.Client, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        assert process.poll() is None, f"the program exited:\n{log.read_text()}"
        try:
            client.get("/openapi.json")
            return
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"not serving yet:\n{log.read_text()}"
            time.sleep(0.1)


def wait_completed(
    client: httpx.Client, session_id: str, timeout: float = 20.0, **request: Any
) -> dict[str, Any]:
    """Poll ``/agents/status`` until the session's turn has completed."""
    deadline = time.monotonic() + timeout
    while True:
        response = client.get("/agents/status", params={"sessionId": session_id}, **request)
        assert response.status_code == 200, response.text
        view: dict[str, Any] = response.json()
        if view["status"] == "completed":
            return view
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


def token_round_trip(client: httpx.Client) -> str:
    """``/agents/start`` with the greeter, then its status with the token it answered until
    the turn completes; the session id. A call without the token is refused 401."""
    started = client.post("/agents/start", json={"agentType": "greeter", "message": "hi"})
    assert started.status_code == 200, started.text
    body = started.json()
    assert set(body) == {"sessionId", "runId", "token"}, body
    sid: str = body["sessionId"]
    bearer = {"Authorization": f"Bearer {body['token']}"}
    wait_completed(client, sid, headers=bearer)
    anonymous = client.get("/agents/status", params={"sessionId": sid})
    assert anonymous.status_code == 401, anonymous.text
    return sid


def assert_logged_turn(output: str, session_id: str) -> None:
    """The server's output has the helix-dbos event line of the session's completed turn."""
    lines = [line for line in output.splitlines() if f"turn.summary sessionId={session_id}" in line]
    assert len(lines) == 1, output
    assert " INFO " in lines[0] and "outcome=completed" in lines[0], lines
