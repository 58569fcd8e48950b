"""A SIGKILL between the first and the second approval of a quorum loses neither (Postgres
and SQLite).

A child process (``quorum_worker``) parks a ``two_of_three`` payment, commits bob's approval
(the first of two) and is killed with SIGKILL while the turn is parked live in it. A runtime
with the same executor and version then recovers the turn: the inbox still shows ``1 of 2``
with bob, cy's approval decides it, the tool runs once, and the record holds both approvals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from helix_dbos.runtime import AgentRuntime
from helix_dbos.store.decisions import DecisionQuery, list_decisions
from helix_dbos.store.migrate import upgrade
from tests.processes import reaped
from tests.runtime import quorum_worker as worker
from tests.support.bank import ARGS, Bank
from tests.support.treasury import finance, treasurer

BOUND = 60.0


def _voted(url: str) -> dict[str, Any]:
    """Run the worker until its first approval is committed, then SIGKILL it."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(worker.__file__)), url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    with reaped(proc):
        assert proc.stdout is not None
        found: list[dict[str, Any]] = []
        for line in proc.stdout:
            if line.strip() == "voted":
                break
            found.append(json.loads(line))
        else:
            proc.wait(timeout=BOUND)
            raise AssertionError(proc.stderr.read() if proc.stderr else "no vote")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=BOUND)
    assert proc.returncode == -signal.SIGKILL
    (parked,) = found
    return parked


async def test_a_sigkill_between_two_approvals_loses_neither(db_url: str) -> None:
    upgrade(db_url)
    parked = _voted(db_url)
    bank = Bank()
    runtime = AgentRuntime([treasurer(bank)], worker.settings(db_url))
    await runtime.launch()
    try:
        sid = parked["session"]
        (listed,) = (await runtime.approvals(session_id=sid)).approvals
        assert listed.quorum is not None
        assert (listed.quorum["text"], listed.quorum["approvers"]) == ("1 of 2", ["bob"])
        assert bank.runs == []
        answer = await runtime.submit_tool_result(
            sid,
            parked["toolCallId"],
            kind="approval-response",
            approval_id=parked["approvalId"],
            approved=True,
            decider=finance("cy"),
        )
        assert answer.status == "accepted"
        assert (await runtime.wait(sid, timeout=BOUND))["status"] == "completed"
        assert bank.runs == [ARGS]
        page = await list_decisions(runtime.store, DecisionQuery(approval_id=parked["approvalId"]))
        rows = [(d.principal, d.votes, d.final) for d in reversed(page.decisions)]
        assert rows == [("bob", 1, False), ("cy", 2, True)]
        events = await runtime.store.read_events(sid, 0)
        (end,) = [e.data for e in events if e.type == "tool_end"]
        assert end["decider"]["approvers"] == ["bob", "cy"]
    finally:
        await runtime.shutdown()
