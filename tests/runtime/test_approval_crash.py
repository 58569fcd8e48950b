"""SIGKILL with a pending approval, a restart, then the approval: the tool runs exactly once.

Both runtimes live in child processes (one DBOS per process): the first parks on the approval
and is killed; the second launches with the same executor id and version, which recovers the
parked turn, then submits the approval itself and waits for the turn to end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helix_dbos.store.store import SessionStore
from tests.processes import reaped
from tests.runtime import approval_worker

WORKER = Path(approval_worker.__file__)


def _run(*args: str, log: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", approval_worker.TOOL_LOG_ENV: str(log)}
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _executions(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _workflow_status(url: str, workflow_id: str) -> tuple[str, str, str]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT status, executor_id, application_version FROM dbos.workflow_status "
            "WHERE workflow_uuid = %s",
            (workflow_id,),
        ).fetchone()
    assert row is not None
    return row


@pytest.mark.slow
async def test_sigkill_with_pending_approval_then_restart_then_approve(
    pg_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "executions.jsonl"
    with reaped(_run("park", pg_url, log=log)) as parker:
        assert parker.stdout is not None
        line = parker.stdout.readline()
        assert line, parker.stderr.read() if parker.stderr else "the worker printed nothing"
        parked = json.loads(line)
        parker.send_signal(signal.SIGKILL)
        parker.wait(timeout=10)
    assert parker.returncode == -signal.SIGKILL
    assert parked["approvalId"].endswith(f"::{parked['toolCallId']}")

    # Killed while parked: nothing ran, the approval is durably pending, the turn is PENDING.
    assert _executions(log) == []
    store = SessionStore.from_url(pg_url)
    try:
        state = await store.get(parked["session"])
        assert state.status == "suspended_client_tool"
        assert list(state.pending) == [parked["toolCallId"]]
        assert state.pending[parked["toolCallId"]].approval_id == parked["approvalId"]
        workflow_id = state.workflow_id
        assert workflow_id is not None
        assert _workflow_status(pg_url, workflow_id) == (
            "PENDING",
            approval_worker.EXECUTOR,
            approval_worker.VERSION,
        )

        approve = ("approve", pg_url, parked["session"], parked["toolCallId"], parked["approvalId"])
        with reaped(_run(*approve, log=log)) as approver:
            out, err = approver.communicate(timeout=90)
        assert approver.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1])

        assert result["answer"]["status"] == "accepted"
        assert result["status"] == "completed"
        assert result["workflow"] == "SUCCESS"
        assert result["toolResults"] == [{"transferred": 40, "to": "alice"}]
        assert "transferred" in result["last"]
        runs = _executions(log)
        assert len(runs) == 1, f"the approved tool ran {len(runs)} times: {runs}"
        assert runs[0]["pid"] == approver.pid and runs[0]["amount"] == 40

        final = await store.get(parked["session"])
        assert final.status == "completed"
        assert final.pending == {} and final.ownership == {}
        assert final.completed[parked["toolCallId"]].outcome == "answered"
        history = await store.load_messages(parked["session"])
        assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
        assert _workflow_status(pg_url, workflow_id)[0] == "SUCCESS"
    finally:
        await store.close()
