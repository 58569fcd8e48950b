"""A child process for the lifecycle crash tests: it starts a retry or a rewind whose model
call then hangs, prints ``{"session", "runId"}``, and waits to be killed.

``retry URL``: a turn fails before any step, then is retried.
``rewind URL``: a turn completes after one client call, then is rewound to its results.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from helix_dbos.config import HelixSettings
from helix_dbos.runtime import AgentRuntime
from tests.runtime.lifecycle_agents import FAILING, HANGING, LifecycleLLM, lifecycle_agent

EXECUTOR = "lifecycle-crash-exec"
VERSION = "lifecycle-crash-1"


def settings(url: str) -> HelixSettings:
    return HelixSettings(database_url=url, executor_id=EXECUTOR, application_version=VERSION)


async def main(mode: str, url: str) -> None:
    llm = LifecycleLLM()
    runtime = AgentRuntime([lifecycle_agent(llm)], settings(url))
    await runtime.launch()
    if mode == "retry":
        handle = await runtime.start("lc", "fail then hang")
        await runtime.wait(handle.session_id)
        FAILING["on"] = False
        HANGING["on"] = True
        again = await runtime.retry(handle.session_id)
    else:
        handle = await runtime.start("lc", "1 edit hang")
        [call] = await runtime.wait_for_pending(handle.session_id)
        await runtime.submit_tool_result(
            handle.session_id, call["toolCallId"], result={"applied": 1}
        )
        await runtime.wait(handle.session_id)
        cps = await runtime.checkpoints(handle.session_id)
        results = next(c for c in cps if c["kind"] == "results")
        HANGING["on"] = True
        again = await runtime.rewind(handle.session_id, results["checkpointId"])
    await llm.hung.wait()
    print(json.dumps({"session": handle.session_id, "runId": again.run_id}), flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
