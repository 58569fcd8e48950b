"""SIGKILL with a persistent session parked on a client call, after it hibernated and woke:
a new process (same executor id and version) recovers the workflow, the call completes, and
later messages are still delivered to that same workflow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from dbos import DBOS

from helix_dbos.runtime import AgentRuntime, names
from tests.processes import reaped
from tests.runtime import persistent_worker
from tests.runtime.persistent_agents import keeper_agent

WORKER = Path(persistent_worker.__file__)


@pytest.mark.slow
async def test_sigkill_with_a_persistent_session_parked_on_a_client_call(db_url: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), db_url, "1.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    with reaped(proc):
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        parked = json.loads(line)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    sid = parked["session"]
    assert parked["second"] != parked["first"]

    # A longer TTL here: the recovered workflow stays live for the messages below.
    runtime = AgentRuntime(
        [keeper_agent(idle_ttl=60, timeout=600)], persistent_worker.settings(db_url)
    )
    await runtime.launch()
    try:
        [found] = await DBOS.list_workflows_async(workflow_ids=[parked["second"]])
        assert found.status in ("PENDING", "ENQUEUED") and found.name == names.PERSISTENT_WORKFLOW
        await runtime.wait_for_pending(sid, timeout=60)
        answer = await runtime.submit_tool_result(sid, parked["call"], result={"applied": 3})
        assert answer.status == "accepted"
        assert (await runtime.wait(sid, timeout=60))["status"] == "completed"
        later = await runtime.start("keeper", "still here?", session_id=sid)
        assert later.delivery == "delivered" and later.workflow_id == parked["second"]
        assert (await runtime.wait(sid, timeout=60))["status"] == "completed"
        history = await runtime.messages(sid)
        assert [m.content for m in history if m.role != "assistant" or not m.tool_calls] == [
            "hello",
            "echo: hello",
            "1 edit",
            '{"applied": 3}',
            'results: {"applied": 3}',
            "still here?",
            "echo: still here?",
        ]
        # One tool result for the one call: nothing duplicated by the recovery.
        assert [m.tool_call_id for m in history if m.role == "tool"] == [parked["call"]]
    finally:
        await runtime.shutdown()
