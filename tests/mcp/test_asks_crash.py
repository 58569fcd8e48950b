"""SIGKILL while a turn waits on an MCP tool's ``input_required``, a restart, then the answer:
the turn goes on once, and the tool is called again once, with the answer. The same between
two rounds of a tool that asks twice: the recovered turn parks on the second round again and
the tool's request state of that round (sealed by the server under its configured key)
reaches the restarted server. On Postgres and SQLite.

Both runtimes live in child processes (one DBOS per process): the first parks on the form
and is killed (its stdio server with it); the second launches with the same executor id and
version, recovers the parked turn, submits the answer and waits for the turn to end. On
SQLite one process at a time is the supported deployment, and here it is: the second starts
after the first is gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.mcp.conftest import ROOT, Journal
from tests.processes import reaped

pytestmark = pytest.mark.slow


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


def _killed_while_parked(db_url: str, journal: Journal, tool: str) -> dict[str, Any]:
    """Park ``tool``'s call in a child process, SIGKILL it; what it printed once parked."""
    with reaped(_run("park", db_url, str(journal.path), tool)) as parker:
        assert parker.stdout is not None
        line = parker.stdout.readline()
        assert line, parker.stderr.read() if parker.stderr else "the worker printed nothing"
        parked: dict[str, Any] = json.loads(line)
        parker.send_signal(signal.SIGKILL)
        parker.wait(timeout=10)
    return parked


def _answered_after_restart(
    db_url: str, journal: Journal, tool: str, parked: dict[str, Any]
) -> dict[str, Any]:
    """Launch a second process, answer the parked call: what it printed at the turn's end."""
    answer = ("answer", db_url, str(journal.path), tool, parked["session"], parked["toolCallId"])
    with reaped(_run(*answer)) as answerer:
        out, err = answerer.communicate(timeout=120)
    assert answerer.returncode == 0, err
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


async def test_sigkill_while_an_mcp_tool_waits_for_input_then_answered_after_restart(
    db_url: str, tmp_path: Path
) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    parked = _killed_while_parked(db_url, journal, "confirm")
    assert parked["input"]["inputRequests"]["sure"]["params"]["message"] == "Sure?"
    assert [c["args"] for c in journal.calls("confirm")] == [{"answered": []}]

    result = _answered_after_restart(db_url, journal, "confirm", parked)
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


async def test_sigkill_between_two_rounds_of_questions_then_the_second_answered_after_restart(
    db_url: str, tmp_path: Path
) -> None:
    """``survey`` asked, was answered, asked again (new request state) and the process died
    parked on the second round: the restarted process recovers the turn parked on that round,
    its answer calls the tool once more with the second round's state, and the turn ends."""
    journal = Journal(tmp_path / "journal.jsonl")
    parked = _killed_while_parked(db_url, journal, "survey")
    assert parked["input"]["round"] == 2
    assert parked["input"]["inputRequests"]["colour"]["params"]["message"] == (
        "Favourite colour of Ada?"
    )
    result = _answered_after_restart(db_url, journal, "survey", parked)
    assert result == {
        "answer": "accepted",
        "status": "completed",
        "last": 'tool said: {"result": "Ada likes green"}',
    }
    # Each round's call once: the recovery replayed the first two, the answer made the third.
    assert [(c["args"]["answered"], c["args"]["state"]) for c in journal.calls("survey")] == [
        ([], ""),
        (["name"], "asked-name"),
        (["colour"], "asked-colour:Ada"),
    ]
