"""Running ``helix-dbos serve`` as its own process, as an operator would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.http.conftest import _free_port

SECRET = "serve-tests-secret-0123456789abcdef0123"


@dataclass
class Served:
    """A running server: its URL, and its stderr once it has stopped."""

    url: str
    proc: subprocess.Popen[str]
    stderr: str = ""
    lines: list[str] = field(default_factory=list)


def serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a served process: a private SQLite file, and ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HELIX_", "DBOS_", "OPENAI_", "ANTHROPIC_"))
    }
    env["HELIX_DATABASE_URL"] = f"sqlite:///{tmp_path / 'serve.sqlite'}"
    env.update(extra)
    return env


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``helix-dbos ARGS`` to completion (a command that must fail fast)."""
    return subprocess.run(
        [sys.executable, "-m", "helix_dbos.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@contextmanager
def serving(args: list[str], env: dict[str, str], cwd: Path) -> Iterator[Served]:
    """``helix-dbos serve ARGS --port <free>`` until the block ends (then SIGTERM)."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "helix_dbos.cli", "serve", *args, "--port", str(port)],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    served = Served(f"http://127.0.0.1:{port}", proc)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited {proc.returncode}: {proc.communicate()[1]}")
            try:
                httpx.get(f"{served.url}/openapi.json", timeout=2).raise_for_status()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            _, served.stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, served.stderr = proc.communicate()
        served.lines = served.stderr.splitlines()
