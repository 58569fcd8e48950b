"""Child process: start a turn, wait until it parks on a client call, print it, die (SIGKILL).

Usage: python crash_child.py DATABASE_URL EXECUTOR_ID APP_VERSION
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from helix_dbos.config import HelixSettings
from helix_dbos.runtime import AgentRuntime
from tests.observability.obs_agents import make_agents


async def main(url: str, executor_id: str, version: str) -> None:
    runtime = AgentRuntime(
        make_agents(),
        HelixSettings(database_url=url, executor_id=executor_id, application_version=version),
    )
    await runtime.launch()
    handle = await runtime.start("ops", "pick_color")
    (pending,) = await runtime.wait_for_pending(handle.session_id)
    print(
        json.dumps(
            {
                "sessionId": handle.session_id,
                "runId": handle.run_id,
                "toolCallId": pending["toolCallId"],
            }
        ),
        flush=True,
    )
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
