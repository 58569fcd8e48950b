"""`helix-dbos serve`: refuses without authentication; serves the demo agents with tokens."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from helix_dbos.cli import main

from .conftest import SECRET, _free_port


@pytest.mark.usefixtures("restore_logging")
def test_serve_refuses_without_a_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No HELIX_AUTH_SECRET and no --allow-unauthenticated: exit 2 with one line on stderr;
    a secret under 32 bytes is refused the same way."""
    monkeypatch.delenv("HELIX_AUTH_SECRET", raising=False)
    assert main(["serve"]) == 2
    assert "HELIX_AUTH_SECRET" in capsys.readouterr().err
    monkeypatch.setenv("HELIX_AUTH_SECRET", "short")
    assert main(["serve"]) == 2
    assert "32 bytes" in capsys.readouterr().err


def test_serve_runs_the_standalone_server(tmp_path: Path) -> None:
    """The standalone server (its own process, embedded SQLite): /start issues a token, the
    token opens the session's status."""
    port = _free_port()
    env = {
        **os.environ,
        "HELIX_AUTH_SECRET": SECRET,
        "HELIX_DATABASE_URL": f"sqlite:///{tmp_path / 'serve.sqlite'}",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "helix_dbos.cli", "serve", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                httpx.get(f"{base}/openapi.json", timeout=1).raise_for_status()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        with httpx.Client(base_url=base, timeout=10) as client:
            started = client.post("/start", json={"agentType": "editor", "message": "hi"})
            assert started.status_code == 200, started.text
            sid, token = started.json()["sessionId"], started.json()["token"]
            assert client.get("/status", params={"sessionId": sid}).status_code == 401
            ok = client.get(
                "/status", params={"sessionId": sid}, headers={"Authorization": f"Bearer {token}"}
            )
            assert ok.status_code == 200 and ok.json()["sessionId"] == sid
            missing = client.get("/nowhere")
            assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    finally:
        proc.terminate()
        proc.wait(30)
