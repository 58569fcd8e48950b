"""A child process for the persistent-agent crash test: a persistent session runs a turn,
hibernates, wakes with a message that parks a client call, prints
``{"session", "call", "first", "second"}`` (the call, and both workflows' ids), and waits to
be killed."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dbos import DBOS

from helix_dbos.config import HelixSettings
from helix_dbos.runtime import AgentRuntime
from tests.runtime.persistent_agents import keeper_agent

EXECUTOR = "persistent-crash-exec"
VERSION = "persistent-crash-1"


def settings(url: str) -> HelixSettings:
    return HelixSettings(database_url=url, executor_id=EXECUTOR, application_version=VERSION)


async def main(url: str, idle_ttl: float) -> None:
    runtime = AgentRuntime([keeper_agent(idle_ttl=idle_ttl, timeout=600)], settings(url))
    await runtime.launch()
    first = await runtime.start("keeper", "hello")
    sid = first.session_id
    await runtime.wait(sid)
    assert first.workflow_id is not None
    while True:  # the idle TTL lapses: the workflow hibernates
        [found] = await DBOS.list_workflows_async(workflow_ids=[first.workflow_id])
        if found.status == "SUCCESS":
            break
        await asyncio.sleep(0.05)
    second = await runtime.start("keeper", "1 edit", session_id=sid)
    assert second.delivery == "started", second
    [call] = await runtime.wait_for_pending(sid)
    out = {
        "session": sid,
        "call": call["toolCallId"],
        "first": first.workflow_id,
        "second": second.workflow_id,
    }
    print(json.dumps(out), flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
