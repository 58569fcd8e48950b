"""Real ``helix-dbos serve`` processes on one Postgres database, for the fleet tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import psycopg

from helix_dbos.config import parse_database_url


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """One ``helix-dbos serve`` subprocess (no auth; the demo agents)."""

    def __init__(self, url: str, log_dir: Path, name: str, **env: str) -> None:
        self.name = name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"{name}.log"
        self.executor_id = env.get("HELIX_EXECUTOR_ID", f"exec-{name}")
        full_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("HELIX_")},
            "HELIX_DATABASE_URL": url,
            "HELIX_EXECUTOR_ID": self.executor_id,
            **env,
        }
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "helix_dbos.cli",
                "serve",
                "--allow-unauthenticated",
                "--port",
                str(self.port),
            ],
            env=full_env,
            cwd=log_dir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.client = httpx.Client(base_url=self.base, timeout=30)

    def wait_ready(self, timeout: float = 60) -> Server:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"{self.name} exited:\n{self.log()}"
            try:
                self.client.get("/openapi.json", timeout=1).raise_for_status()
                return self
            except httpx.TransportError:
                assert time.monotonic() < deadline, f"{self.name} did not start:\n{self.log()}"
                time.sleep(0.1)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        """SIGKILL: gone for good, nothing cleaned up."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM: a graceful stop (a deploy)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)

    def close(self) -> None:
        self.kill()
        self.client.close()
        self._log.close()

    # -- the API --------------------------------------------------------------------------------

    def start(self, message: str = "replace 'a' with 'b'") -> str:
        r = self.client.post("/start", json={"agentType": "editor", "message": message})
        assert r.status_code == 200, r.text
        sid: str = r.json()["sessionId"]
        return sid

    def status(self, sid: str) -> dict[str, Any]:
        r = self.client.get("/status", params={"sessionId": sid})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def submit(self, sid: str, tool_call_id: str) -> dict[str, Any]:
        r = self.client.post(
            "/submit-tool-result",
            json={
                "sessionId": sid,
                "toolCallId": tool_call_id,
                "result": {"applied": 1, "failed": 0},
            },
        )
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def parked_call(self, sid: str, timeout: float = 30) -> str:
        """Wait until the session is parked on its client call; its toolCallId."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.status(sid)
            waiting = [p for p in view["pendingToolCalls"] if "submittedAt" not in p]
            if view["status"] == "suspended_client_tool" and waiting:
                return str(waiting[0]["toolCallId"])
            assert time.monotonic() < deadline, view
            time.sleep(0.05)


def wait_completed(servers: Iterable[Server], sids: list[str], timeout: float) -> float:
    """Poll the live servers until every session completed; the seconds it took."""
    live = [s for s in servers if s.proc.poll() is None]
    began = time.monotonic()
    left = set(sids)
    while left:
        for sid in sorted(left):
            view = live[hash(sid) % len(live)].status(sid)
            assert view["status"] not in ("failed", "interrupted"), view
            if view["status"] == "completed":
                left.discard(sid)
        if left:
            assert time.monotonic() - began < timeout, f"not completed: {sorted(left)}"
            time.sleep(0.1)
    return time.monotonic() - began


def sql(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(parse_database_url(url).user) as conn:
        return list(conn.execute(query, params).fetchall())


def assert_each_turn_ran_once(url: str, sids: list[str]) -> None:
    """Per session: user, assistant (the call), ONE tool result, ONE final answer; and one
    exactly-once checkpoint per model answer of the turn's workflows (none recorded twice)."""
    for sid in sids:
        roles = [
            r
            for (r,) in sql(
                url,
                "SELECT role FROM __agents_messages WHERE session_id = %s ORDER BY message_id",
                sid,
            )
        ]
        assert roles == ["user", "assistant", "tool", "assistant"], (sid, roles)
        models = sql(
            url,
            "SELECT count(*) FROM __agents_checkpoints "
            "WHERE session_id = %s AND checkpoint_id LIKE 'helix:%%:model'",
            sid,
        )
        assert models == [(2,)], (sid, models)
