"""A child process for the companion crash tests: a parent sends to its companion, and the
process stops at the point under test, prints ``{"session"}`` and waits to be killed.

Modes (the stop is a wrapper this process puts around the runtime's own function):

* ``send``: the send committed the companion's claim and its entry, and is about to start
  the companion's workflow (``persistent.start_persistent``): the parent's send step is
  unrecorded and the companion's workflow does not exist;
* ``reply``: the companion's turn ended (committed) and its reply is about to be handed to
  the parent (``companion_replies.report``);
* ``replied``: the reply's commit landed, and the companion's workflow has not gone on yet;
* ``turn``: the companion's turn (``ask ...``) is parked on its client call.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from helix_dbos.config import HelixSettings
from helix_dbos.runtime import AgentRuntime
from helix_dbos.runtime._companions import persistent
from helix_dbos.runtime._companions import replies as companion_replies
from tests.support.companions import companion_calls, lead_agent

EXECUTOR = "companion-crash-exec"
VERSION = "companion-crash-1"


def settings(url: str) -> HelixSettings:
    return HelixSettings(database_url=url, executor_id=EXECUTOR, application_version=VERSION)


async def _stop_here(session: dict[str, str]) -> None:
    while "session" not in session:  # the turn may get here before ``start`` returned
        await asyncio.sleep(0.01)
    print(json.dumps(session), flush=True)
    await asyncio.sleep(3600)


def _wrap(mode: str, session: dict[str, str]) -> None:
    if mode == "send":
        real_start = persistent.start_persistent

        async def start(state: Any, run_id: str, workflow_id: str) -> Any:
            if ".companion." in state.session_id:
                await _stop_here(session)
            return await real_start(state, run_id, workflow_id)

        persistent.start_persistent = start
        return
    real_report = companion_replies.report

    async def report(*args: Any) -> None:
        if mode == "reply":
            await _stop_here(session)
        await real_report(*args)
        await _stop_here(session)

    companion_replies.report = report  # type: ignore[assignment]


async def main(url: str, mode: str) -> None:
    runtime = AgentRuntime([lead_agent()], settings(url))
    await runtime.launch()
    session: dict[str, str] = {}
    if mode == "turn":
        handle = await runtime.start("lead", "send reviewer: ask the intro")
        session["session"] = handle.session_id
        [call] = await companion_calls(runtime, handle.session_id)
        session["call"] = call["toolCallId"]
        await _stop_here(session)
    _wrap(mode, session)
    handle = await runtime.start("lead", "send reviewer: check the intro")
    session["session"] = handle.session_id
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
