"""`bash scripts/demo`: the Quick start's first command installs into .venv and serves the demo
with session tokens on, printing the URL to open."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.http.conftest import _free_port

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_the_demo_script_installs_and_serves_the_demo(tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELIX_", "DBOS_"))}
    env.update(PORT=str(port), HELIX_DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite'}")
    proc = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "demo")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                httpx.get(f"{base}/openapi.json", timeout=2).raise_for_status()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the demo did not start"
                time.sleep(0.2)
        created = httpx.post(f"{base}/chat/sessions", timeout=10).json()
        assert created["id"] and created["token"], "session tokens are on"
        refused = httpx.get(f"{base}/status", params={"sessionId": created["id"]}, timeout=10)
        assert refused.status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert f"open http://127.0.0.1:{port}/" in out
    assert ".venv/bin/helix-dbos" in out
    assert (ROOT / ".venv" / "bin" / "helix-dbos").exists()
    assert "Uvicorn running on" in err
