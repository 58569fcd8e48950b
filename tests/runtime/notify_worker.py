"""A child process for the notification tests: a runtime of its own on the test's database.

``park URL``: launch (executor ``EXECUTOR``, version ``VERSION``, as the test's own runtime),
with an ``on_pending`` hook that prints the notification as one JSON line and then never
returns; start a turn whose model calls the approval gate ``transfer``, and wait to be
killed. The pending event is then claimed, its hook running, when the process dies.

``remind URL``: launch as another executor of the same fleet, with an ``on_deadline_near``
hook that prints ``{"hook": key}``; print ``{"log": ...}`` for each
``client_tool.deadline_near`` this process logs. Prints ``ready`` once launched, then runs
until killed: a second dispatcher beside the test's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import Any

from pydantic import BaseModel

from helix_dbos.config import HelixSettings
from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.agents import Agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.observability.log import logger
from helix_dbos.runtime import AgentRuntime, Notification

EXECUTOR = "test-exec"
VERSION = "test"
#: How long a claimed event is kept from other dispatchers here (short: the test waits it out).
LEASE_SECONDS = 2.0


class Transfer(BaseModel):
    amount: int


def script(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    if last.role == "user":
        return call(request, ("transfer", {"amount": int(last.content.split()[-1])}))
    return reply(f"tool said: {last.content}")


def transfer(args: Transfer) -> dict[str, int]:
    return {"transferred": args.amount}


def gatekeeper(timeout: float = 300, remind_before: float | None = None) -> Agent:
    """One approval gate, ``transfer``; a user message ``pay N`` calls it with ``N``."""
    return define_agent(
        "gatekeeper",
        llm=ScriptedLLM(script),
        tools=[
            define_tool(
                "transfer",
                "Move money",
                Transfer,
                execute=transfer,
                require_approval=True,
                client_tool_timeout=timeout,
                remind_before=remind_before,
            )
        ],
    )


def emit(value: Any) -> None:
    print(json.dumps(value), flush=True)


class _LogLines(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) == "client_tool.deadline_near":
            emit({"log": getattr(record, "fields", {})})


async def park(url: str) -> None:
    settings = HelixSettings(database_url=url, executor_id=EXECUTOR, application_version=VERSION)
    runtime = AgentRuntime([gatekeeper()], settings)
    runtime.configure_notifications(poll_seconds=0.05, lease_seconds=LEASE_SECONDS)

    @runtime.on_pending
    async def stuck(note: Notification) -> None:
        emit({"key": note.key, "session": note.session_id, "attempt": note.attempt})
        emit({"approvalId": note.approval_id, "toolCallId": note.tool_call_id})
        await asyncio.Event().wait()  # still running when the process is killed

    await runtime.launch()
    await runtime.start("gatekeeper", "pay 40")
    await asyncio.sleep(3600)


async def remind(url: str) -> None:
    settings = HelixSettings(
        database_url=url, executor_id=f"remind-{os.getpid()}", application_version=VERSION
    )
    runtime = AgentRuntime([gatekeeper()], settings)
    runtime.configure_notifications(poll_seconds=0.02)
    runtime.on_deadline_near(lambda note: emit({"hook": note.key}))
    logger.addHandler(_LogLines())
    logger.setLevel(logging.INFO)
    await runtime.launch()
    emit("ready")
    await asyncio.sleep(3600)


if __name__ == "__main__":
    mode, db_url = sys.argv[1], sys.argv[2]
    asyncio.run(park(db_url) if mode == "park" else remind(db_url))
