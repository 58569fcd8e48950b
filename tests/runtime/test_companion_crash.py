"""SIGKILL during a companion's send and during its reply, on Postgres and SQLite: a new
process (same executor id and version) recovers the parent's turn and the companion's
workflow, and there is exactly one delivery (one companion turn on the message) and one
notification on the parent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helix_dbos.core.markers import is_sub_agent_notification
from helix_dbos.runtime import AgentRuntime, names
from tests.processes import reaped
from tests.runtime import companion_worker
from tests.support.companions import lead_agent, until

WORKER = Path(companion_worker.__file__)


def _killed_at(db_url: str, mode: str) -> str:
    """Run the worker until it stops at ``mode``, SIGKILL it: the parent's session."""
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), db_url, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    with reaped(proc):
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    return str(json.loads(line)["session"])


async def _recovered(db_url: str, sid: str) -> None:
    """A new process recovers everything: one delivery, one reply, one notification."""
    runtime = AgentRuntime([lead_agent()], companion_worker.settings(db_url))
    await runtime.launch()
    try:
        mate_id = names.companion_session_id(sid, "reviewer")

        async def settled() -> bool:
            parent, mate = await runtime.session(sid), await runtime.session(mate_id)
            replies = [e for e in await runtime.events(sid) if e.type == "companion_message"]
            idle = ("completed", "failed")
            return parent.status in idle and mate.status in idle and bool(replies)

        await until(settled, timeout=60)
        # The reply, kept if it came while the parent's turn ran, is in the log after this.
        await (await runtime.start("lead", "thanks", session_id=sid)).result()
        log = await runtime.messages(sid)
        [sent] = [m for m in log if m.role == "tool"]
        assert sent.result["delivered"] is True
        notes = [m.content for m in log if is_sub_agent_notification(m)]
        assert notes == ["[companion reviewer] reviewed: check the intro"]
        replies = [e for e in await runtime.events(sid) if e.type == "companion_message"]
        assert len(replies) == 1
        assert [m.content for m in await runtime.messages(mate_id)] == [
            "check the intro",
            "reviewed: check the intro",
        ]
        mate = await runtime.session(mate_id)
        assert mate.run_id == sent.result["runId"]
        assert [e.type for e in await runtime.events(mate_id)].count("turn_start") == 1
    finally:
        await runtime.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["send", "reply", "replied"])
async def test_sigkill_during_a_send_or_a_reply_delivers_and_notifies_once(
    db_url: str, mode: str
) -> None:
    sid = _killed_at(db_url, mode)
    await _recovered(db_url, sid)
