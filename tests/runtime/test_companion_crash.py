"""SIGKILL during a companion's send, during its turn (parked on a client call) and during its
reply, on Postgres and SQLite: a new process (same executor id and version) recovers the
parent's turn and the companion's workflow, and there is exactly one delivery (one companion
turn on the message) and one notification on the parent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from dbos import DBOS

from helix_dbos.core.markers import is_sub_agent_notification
from helix_dbos.runtime import AgentRuntime, names
from tests.processes import reaped
from tests.runtime import companion_worker
from tests.support.companions import lead_agent, until

WORKER = Path(companion_worker.__file__)


def _killed_at(db_url: str, mode: str) -> dict[str, str]:
    """Run the worker until it stops at ``mode``, SIGKILL it: what it printed."""
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
    return dict(json.loads(line))


async def _recovered(db_url: str, sid: str, call: str | None = None) -> None:
    """A new process recovers everything: one delivery, one reply, one notification. With
    ``call``: the companion's parked call, answered on the root first."""
    runtime = AgentRuntime([lead_agent()], companion_worker.settings(db_url))
    await runtime.launch()
    try:
        mate_id = names.companion_session_id(sid, "reviewer")
        asked, said = "check the intro", "reviewed: check the intro"
        if call is not None:
            answer = await runtime.submit_tool_result(sid, call, result={"answer": "yes"})
            assert answer.status == "accepted"
            asked, said = "ask the intro", 'answered: {"answer": "yes"}'

        seen: list[tuple[str, str, int]] = []

        async def settled() -> bool:
            parent, mate = await runtime.session(sid), await runtime.session(mate_id)
            replies = [e for e in await runtime.events(sid) if e.type == "companion_message"]
            seen[:] = [(parent.status, mate.status, len(replies))]
            idle = ("completed", "failed")
            return parent.status in idle and mate.status in idle and bool(replies)

        try:
            await until(settled, timeout=60)
        except AssertionError:
            raise AssertionError(
                f"not settled: {seen}; {await _evidence(runtime, mate_id)}"
            ) from None
        # The reply, kept if it came while the parent's turn ran, is in the log after this.
        await (await runtime.start("lead", "thanks", session_id=sid)).result()
        log = await runtime.messages(sid)
        [sent] = [m for m in log if m.role == "tool"]
        assert sent.result["delivered"] is True
        notes = [m.content for m in log if is_sub_agent_notification(m)]
        assert notes == [f"[companion reviewer] {said}"]
        replies = [e for e in await runtime.events(sid) if e.type == "companion_message"]
        assert len(replies) == 1
        texts = [m.content for m in await runtime.messages(mate_id) if not m.tool_calls]
        assert texts == [asked, *(['{"answer": "yes"}'] if call else []), said]
        mate = await runtime.session(mate_id)
        assert (mate.run_id or "").startswith(sent.result["runId"])  # or its continuation
        assert [e.type for e in await runtime.events(mate_id)].count("turn_start") == 1
    finally:
        await runtime.shutdown()


async def _evidence(runtime: AgentRuntime, mate_id: str) -> str:
    """What the companion's row, events, checkpoints and DBOS workflows say (a failure's
    message: enough to tell which runner of its batch stopped where)."""
    mate = await runtime.session(mate_id)
    flows = await DBOS.list_workflows_async(
        workflow_id_prefix=f"helix:{mate_id}:", load_input=False, load_output=False
    )
    recorded = {}
    for flow in flows:
        steps = await DBOS.list_workflow_steps_async(flow.workflow_id)
        called = [str(step.get("function_name")) for step in steps]
        recorded[flow.workflow_id] = (str(flow.status), str(flow.executor_id), called)
    return (
        f"companion {mate.status} on {mate.run_id}, workflow {mate.workflow_id}, pending "
        f"{[(p.tool_call_id, p.run_id, p.submitted_at) for p in mate.pending.values()]}, "
        f"metadata {mate.metadata}; events "
        f"{[(e.sequence, e.type, e.run_id) for e in await runtime.events(mate_id)]}; "
        f"checkpoints {[c['checkpointId'] for c in await runtime.checkpoints(mate_id)]}; "
        f"workflows {recorded}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["send", "reply", "replied"])
async def test_sigkill_during_a_send_or_a_reply_delivers_and_notifies_once(
    db_url: str, mode: str
) -> None:
    await _recovered(db_url, _killed_at(db_url, mode)["session"])


@pytest.mark.slow
async def test_sigkill_during_a_companions_parked_turn_then_a_root_submit(db_url: str) -> None:
    """SIGKILL while the companion's turn waits on its client call: the recovered companion
    takes the answer submitted on the parent's root, and replies once."""
    printed = _killed_at(db_url, "turn")
    await _recovered(db_url, printed["session"], printed["call"])
