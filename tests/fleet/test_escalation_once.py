"""An approval's escalation across a fleet: two runtime processes on one Postgres, both
running their outbox dispatchers with an ``on_escalated`` hook, both polling when the
escalations fall due. Each escalation is delivered exactly once across the two processes, and
recorded once (one outbox row, delivered at its first claim).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SESSIONS = 12
ROOT_DIR = Path(__file__).resolve().parents[2]


def _worker(url: str, name: str, log: Path, sessions: int = 0) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT_DIR), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "tests.fleet.escalation_worker", url, name, str(log)]
    return subprocess.Popen(
        [*command, *([str(sessions)] if sessions else [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT_DIR,
    )


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"the worker printed nothing: {err[-3000:]}")
    return line.strip()


def _escalations(url: str) -> list[tuple[str, str, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT payload->>'approvalId', state, attempts FROM __agents_notifications"
            " WHERE kind = 'escalated' ORDER BY id"
        ).fetchall()
    return [(str(a), str(s), int(n)) for a, s, n in rows]


def test_an_escalation_is_delivered_once_across_two_processes(pg_url: str, tmp_path: Path) -> None:
    log = tmp_path / "escalated.jsonl"
    workers: list[subprocess.Popen[str]] = []
    try:
        b = _worker(pg_url, "b", log)
        workers.append(b)
        assert _line(b) == "ready"
        a = _worker(pg_url, "a", log, SESSIONS)
        workers.append(a)
        approvals = json.loads(_line(a))
        assert _line(a) == "ready" and len(set(approvals)) == SESSIONS
        # Both dispatchers poll every 20 ms; the escalations fall due 1.5 s after each park.
        deadline = time.monotonic() + 60
        while True:
            settled = [e for e in _escalations(pg_url) if e[1] != "queued"]
            if len(settled) >= SESSIONS:
                break
            assert time.monotonic() < deadline, _escalations(pg_url)
            time.sleep(0.1)
        time.sleep(1.0)  # room for a second delivery, were there one
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.communicate(timeout=60)
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)

    told = [json.loads(line) for line in log.read_text().splitlines()]
    # Each approval's escalation: one hook call in the whole fleet, one row, one claim.
    assert sorted(t["approvalId"] for t in told) == sorted(approvals), told
    assert len({t["key"] for t in told}) == SESSIONS
    rows = _escalations(pg_url)
    assert sorted(r[0] for r in rows) == sorted(approvals)
    assert {(r[1], r[2]) for r in rows} == {("delivered", 1)}
    # Which process told which (both run a dispatcher; the claims decide).
    print({name: sum(t["name"] == name for t in told) for name in ("a", "b")})
