"""MCP fixtures: the runtime tests' launched runtime, a journal file, and the test server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.processes import reaped
from tests.runtime.conftest import make_runtime

__all__ = ["make_runtime"]

ROOT = Path(__file__).resolve().parent.parent.parent
SERVER = [sys.executable, "-m", "tests.mcp.server_app"]


class Journal:
    """The calls the test server journaled, one dict per call."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        lines = [json.loads(line) for line in self.path.read_text().splitlines()]
        return [c for c in lines if tool is None or c["tool"] == tool]


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path / "journal.jsonl")


def server_env(journal: Journal, label: str = "server") -> dict[str, str]:
    """The environment a test server runs in: the journal, its label, the repository on the
    path (the server is a module of the tests)."""
    return {
        "HELIX_MCP_JOURNAL": str(journal.path),
        "HELIX_MCP_LABEL": label,
        "PYTHONPATH": str(ROOT),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(journal: Journal) -> Iterator[str]:
    """The test server over Streamable HTTP behind the bearer token ``secret``: its URL."""
    port = free_port()
    env = {**server_env(journal, "http"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [*SERVER, "--http", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    with reaped(proc):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
