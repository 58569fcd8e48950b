"""`helix-dbos serve --workers N`: N processes, each its own executor in the fleet."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from helix_dbos.cli import main

from .servers import free_port, sql


def test_workers_each_get_their_own_executor(pg_url: str, tmp_path: Path) -> None:
    """Two workers on one port: two live executors with distinct generated ids, both
    serving (a turn started through the port parks and completes)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "helix_dbos.cli",
            "serve",
            "--allow-unauthenticated",
            "--workers",
            "2",
            "--port",
            str(port),
        ],
        env={**env, "HELIX_DATABASE_URL": pg_url},
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "serve.log").open("wb"),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        live: list[tuple[str, int]] = []
        while len(live) < 2:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, live
            time.sleep(0.2)
            try:
                live = [
                    (e, p)
                    for e, p in sql(
                        pg_url,
                        "SELECT executor_id, pid FROM __agents_executors WHERE stopped_at IS NULL",
                    )
                ]
            except Exception:  # the tables are not there yet
                live = []
        assert len({e for e, _ in live}) == 2 and len({p for _, p in live}) == 2
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            while True:  # the workers registered during startup; now wait for the port
                try:
                    client.get("/openapi.json").raise_for_status()
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            message = 'replace "a" with "b"'  # the demo editor parks on editContent
            sid = client.post("/start", json={"agentType": "editor", "message": message}).json()[
                "sessionId"
            ]
            while True:
                view = client.get("/status", params={"sessionId": sid}).json()
                if view["pendingToolCalls"]:
                    break
                assert time.monotonic() < deadline
                time.sleep(0.05)
            call = view["pendingToolCalls"][0]["toolCallId"]
            r = client.post(
                "/submit-tool-result",
                json={"sessionId": sid, "toolCallId": call, "result": {"applied": 1, "failed": 0}},
            )
            assert r.json()["continuation"]["kind"] == "new_run"
            while client.get("/status", params={"sessionId": sid}).json()["status"] != "completed":
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def test_workers_refuse_one_configured_executor_id(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """HELIX_EXECUTOR_ID names one process: --workers 2 with it is refused in one line (and
    --workers 0 is a usage error)."""
    monkeypatch.setenv("HELIX_EXECUTOR_ID", "pod-1")
    assert main(["serve", "--allow-unauthenticated", "--workers", "2"]) == 2
    assert "HELIX_EXECUTOR_ID" in capsys.readouterr().err
    assert main(["serve", "--allow-unauthenticated", "--workers", "0"]) == 2
