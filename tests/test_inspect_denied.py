"""``inspect`` says how a tombstoned call ended as its ``tool_end`` does: a denied approval is
``denied``, not the tombstone's ``answered``."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from helix_dbos.config import HelixSettings
from helix_dbos.demo import demo_agents
from helix_dbos.inspect import inspect_session, render_report
from helix_dbos.runtime import AgentRuntime, Operator


async def test_a_denied_approvals_tombstone_reads_denied(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.sqlite'}"
    settings = HelixSettings(database_url=url, executor_id="inspect-denied")
    async with AgentRuntime(demo_agents(), settings) as runtime:
        handle = await runtime.start("editor", "publish")
        (waiting,) = await runtime.wait_for_pending(handle.session_id)
        await runtime.submit_tool_result(
            handle.session_id,
            waiting["toolCallId"],
            kind="approval-response",
            approval_id=waiting["approvalId"],
            approved=False,
            reason="not yet",
        )
        await runtime.wait(handle.session_id)
        ends = [e for e in await runtime.events(handle.session_id) if e.type == "tool_end"]
        assert [e.data["outcome"] for e in ends] == ["denied"]

    # DBOS shut the loop's default executor down with the runtime: the operator gets a new one.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor())
    call_id = waiting["toolCallId"]
    async with Operator.open(url) as operator:
        report = await inspect_session(operator, handle.session_id)
    assert report.tombstones[call_id].outcome == "answered"  # the stored marker is unchanged
    assert report.tombstone_outcome(call_id) == "denied"
    assert report.dump()["tombstones"][call_id]["waitOutcome"] == "denied"
    (line,) = [x for x in render_report(report).splitlines() if x.strip().startswith(call_id)]
    assert line.split()[1] == "denied"
