"""SIGKILL while a turn waits on an MCP tool's ``input_required``, a restart, then the answer:
the turn goes on once, and the tool is called again once, with the answer.

Both runtimes live in child processes (one DBOS per process): the first parks on the form
and is killed (its stdio server with it); the second launches with the same executor id and
version, recovers the parked turn, submits the answer and waits for the turn to end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.mcp.conftest import ROOT, Journal
from tests.processes import reaped


def _run(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.mcp.ask_worker", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


async def test_sigkill_while_an_mcp_tool_waits_for_input_then_answered_after_restart(
    pg_url: str, tmp_path: Path
) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    with reaped(_run("park", pg_url, str(journal.path))) as parker:
        assert parker.stdout is not None
        line = parker.stdout.readline()
        assert line, parker.stderr.read() if parker.stderr else "the worker printed nothing"
        parked = json.loads(line)
        parker.send_signal(signal.SIGKILL)
        parker.wait(timeout=10)
    assert parked["input"]["inputRequests"]["sure"]["params"]["message"] == "Sure?"
    assert [c["args"] for c in journal.calls("confirm")] == [{"answered": []}]

    answer = ("answer", pg_url, str(journal.path), parked["session"], parked["toolCallId"])
    with reaped(_run(*answer)) as answerer:
        out, err = answerer.communicate(timeout=120)
    assert answerer.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {
        "answer": "accepted",
        "status": "completed",
        "last": 'tool said: {"result": "confirmed: {\\"ok\\": true}"}',
    }
    # The first call is recorded (not made again by the recovery); the answer made one more.
    assert [c["args"] for c in journal.calls("confirm")] == [
        {"answered": []},
        {"answered": ["sure"]},
    ]
