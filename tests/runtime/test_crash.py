"""A SIGKILL while turns are parked loses nothing: a new process recovers and completes them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from helix_dbos.runtime import AgentRuntime, names
from tests.processes import reaped
from tests.runtime import crash_worker
from tests.runtime.agents import editor_agent

WORKER = Path(crash_worker.__file__)


async def _recorded_steps(url: str, session_id: str) -> set[str]:
    """The names of the DBOS steps recorded by the session's turn workflows."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT DISTINCT function_name FROM dbos.operation_outputs WHERE workflow_uuid LIKE %s",
            (f"helix:{session_id}:%",),
        )
        return {row[0] for row in await cur.fetchall()}


def _run(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@pytest.mark.slow
@pytest.mark.parametrize("layout", [2, 3])
async def test_sigkill_with_parked_turns(pg_url: str, layout: int) -> None:
    """Kill a process with 4 parked turns (6 calls); submit some calls while it is down and
    the rest after a new process recovers them; every turn completes, no result lost or
    duplicated. Layout 2 is a turn parked by a contract-2 release, recovered by this one."""
    turns = []
    with reaped(_run("park", pg_url, "4", str(layout))) as parker:
        assert parker.stdout is not None
        for line in parker.stdout:
            if line.strip() == "parked":
                break
            turns.append(json.loads(line))
        assert len(turns) == 4, parker.stderr.read() if parker.stderr else ""
        parker.send_signal(signal.SIGKILL)
        parker.wait(timeout=10)

    # While no process owns the turns: answer every call of the first two turns.
    early = turns[:2]
    for turn in early:
        with reaped(_run("submit", pg_url, turn["session"], *turn["calls"])) as submitter:
            out, err = submitter.communicate(timeout=60)
        assert submitter.returncode == 0, err
        assert [json.loads(x)["status"] for x in out.splitlines()] == ["accepted"] * len(
            turn["calls"]
        )

    # A new process with the same executor id and version recovers the parked turns.
    runtime = AgentRuntime([editor_agent(timeout=120)], crash_worker.settings(pg_url))
    await runtime.launch()
    try:
        for turn in early:
            view = await runtime.wait(turn["session"], timeout=30)
            assert view["status"] == "completed"
        for turn in turns[2:]:
            await runtime.wait_for_pending(turn["session"], len(turn["calls"]), timeout=30)
            for tcid in turn["calls"]:
                answer = await runtime.submit_tool_result(
                    turn["session"], tcid, result={"applied": 2}
                )
                assert answer.status == "accepted"
            assert (await runtime.wait(turn["session"], timeout=30))["status"] == "completed"
        for turn in turns:
            history = await runtime.messages(turn["session"])
            results = [m.tool_call_id for m in history if m.role == "tool"]
            assert results == turn["calls"]  # one result per call, in order, none duplicated
            assert history[-1].role == "assistant" and history[-1].content.startswith("results:")
            steps = await _recorded_steps(pg_url, turn["session"])
            # The commits are the workflow's own code: none is recorded as a DBOS step.
            assert names.MODEL_STEP not in steps
            assert names.COMMIT_RESULTS_STEP not in steps
            assert "DBOS.recv" in steps
    finally:
        await runtime.shutdown()
