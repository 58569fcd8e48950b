"""A child process for the crash tests.

``park URL N [LAYOUT]``: launch a runtime (fixed executor id and version), start turns whose
model asks for client calls ("1 edit", "2 edits", ...), print one JSON line per turn with its
pending call ids, then wait to be killed. ``LAYOUT`` 1 records the turns as contract-1 did
(every commit a DBOS step), as a process of that release would have left them.
``submit URL SESSION CALL...``: launch with ANOTHER executor id (so it recovers nothing),
submit a result for each call, print the answers, exit.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from helix_dbos.config import HelixSettings
from helix_dbos.runtime import AgentRuntime, names
from tests.runtime.agents import editor_agent

EXECUTOR = "crash-exec"
VERSION = "crash-test-1"


def settings(url: str, executor: str = EXECUTOR) -> HelixSettings:
    return HelixSettings(database_url=url, executor_id=executor, application_version=VERSION)


async def park(url: str, n: int, layout: int) -> None:
    names.TURN_LAYOUT = layout  # what this process's turns record (a release's constant)
    runtime = AgentRuntime([editor_agent(timeout=120)], settings(url))
    await runtime.launch()
    for i in range(n):
        handle = await runtime.start("editor", f"{1 + i % 2} edits")
        calls = await runtime.wait_for_pending(handle.session_id, 1 + i % 2)
        print(
            json.dumps({"session": handle.session_id, "calls": [c["toolCallId"] for c in calls]}),
            flush=True,
        )
    print("parked", flush=True)
    await asyncio.sleep(3600)


async def submit(url: str, session: str, calls: list[str]) -> None:
    runtime = AgentRuntime([editor_agent(timeout=120)], settings(url, "crash-submitter"))
    await runtime.launch()
    for tcid in calls:
        answer = await runtime.submit_tool_result(session, tcid, result={"applied": 1})
        print(json.dumps(answer.dump()), flush=True)
    await runtime.shutdown()


if __name__ == "__main__":
    mode, url = sys.argv[1], sys.argv[2]
    if mode == "park":
        layout = int(sys.argv[4]) if len(sys.argv) > 4 else names.TURN_LAYOUT
        asyncio.run(park(url, int(sys.argv[3]), layout))
    else:
        asyncio.run(submit(url, sys.argv[3], sys.argv[4:]))
