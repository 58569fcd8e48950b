"""A child process for the quorum's crash test: ``python quorum_worker.py URL``.

It launches a runtime of the ``treasurer`` (executor ``EXECUTOR``, version ``VERSION``),
starts a ``two_of_three`` payment as ``ada``, gives bob's approval (the quorum's first of
two), prints ``{session, toolCallId, approvalId}`` and then ``voted``, and waits to be killed:
the turn is parked live in this process, its first approval committed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from helix_dbos.config import HelixSettings
from helix_dbos.runtime import AgentRuntime
from tests.support.bank import Bank
from tests.support.treasury import finance, treasurer

EXECUTOR = "quorum-exec"
VERSION = "quorum-1"


def settings(url: str) -> HelixSettings:
    """The worker's settings, which the test's restarted runtime shares (its recovery)."""
    return HelixSettings(database_url=url, executor_id=EXECUTOR, application_version=VERSION)


async def main(url: str) -> None:
    runtime = AgentRuntime([treasurer(Bank())], settings(url))
    await runtime.launch()
    handle = await runtime.start("treasurer", "two_of_three", principal="ada", tenant="acme")
    await runtime.wait_for_pending(handle.session_id)
    (approval,) = (await runtime.approvals(session_id=handle.session_id)).approvals
    answer = await runtime.submit_tool_result(
        approval.root_session_id,
        approval.tool_call_id,
        kind="approval-response",
        approval_id=approval.approval_id,
        approved=True,
        decider=finance("bob"),
    )
    assert answer.continuation is not None and answer.continuation.kind == "awaiting_quorum"
    line = {
        "session": handle.session_id,
        "toolCallId": approval.tool_call_id,
        "approvalId": approval.approval_id,
    }
    print(json.dumps(line), flush=True)
    print("voted", flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
