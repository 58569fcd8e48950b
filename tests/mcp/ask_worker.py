"""A child process for the crash test of an MCP tool that asks (``input_required``).

``park URL JOURNAL TOOL``: launch a runtime (fixed executor id and version) whose agent calls
the test server's ``TOOL`` (``confirm``, or ``survey``: two rounds) over stdio, print one JSON
line ``{session, toolCallId, input}`` once the turn parks on the form (for ``survey``, after
answering the first round: parked on the second), then wait to be killed.

``answer URL JOURNAL TOOL SESSION CALL``: launch with the SAME executor id and version (launch
recovers the parked turn), submit the form's answer, wait for the turn to end, print one JSON
line with the session's status and its last message, and exit.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import Agent, define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.mcp import mcp_stdio
from helix_dbos.runtime import AgentRuntime

EXECUTOR = "mcp-ask-crash-exec"
VERSION = "mcp-ask-crash-1"
ROOT = Path(__file__).resolve().parent.parent.parent


#: What the last round of each tool is answered with.
ANSWERS: dict[str, Any] = {"confirm": {"ok": True}, "survey": {"colour": "green"}}


def script(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    if last.role == "user":
        return call(request, (f"files__{last.content}", {}))
    return reply(f"tool said: {last.content}")


def assistant(journal: str) -> Agent:
    env = {"HELIX_MCP_JOURNAL": journal, "HELIX_MCP_LABEL": "files", "PYTHONPATH": str(ROOT)}
    files = mcp_stdio("files", [sys.executable, "-m", "tests.mcp.server_app"], env=env)
    return define_agent("assistant", llm=ScriptedLLM(script), tools=[files])


def settings(url: str) -> HelixSettings:
    return HelixSettings(database_url=url, executor_id=EXECUTOR, application_version=VERSION)


async def park(url: str, journal: str, tool: str) -> None:
    runtime = AgentRuntime([assistant(journal)], settings(url))
    await runtime.launch()
    handle = await runtime.start("assistant", tool)
    [pending] = await runtime.wait_for_pending(handle.session_id, timeout=60)
    if tool == "survey":  # the first round answered here: parked on the second
        first = pending["toolCallId"]
        await runtime.submit_tool_result(handle.session_id, first, result={"name": "Ada"})
        [pending] = await runtime.wait_for_pending(handle.session_id, timeout=60)
    line = {
        "session": handle.session_id,
        "toolCallId": pending["toolCallId"],
        "input": pending["input"],
    }
    print(json.dumps(line), flush=True)
    await asyncio.sleep(3600)


async def answer(url: str, journal: str, tool: str, session: str, tool_call_id: str) -> None:
    runtime = AgentRuntime([assistant(journal)], settings(url))
    await runtime.launch()
    submitted = await runtime.submit_tool_result(session, tool_call_id, result=ANSWERS[tool])
    view = await runtime.wait(session, timeout=60)
    history = await runtime.messages(session)
    out = {"answer": submitted.status, "status": view["status"], "last": history[-1].content}
    print(json.dumps(out), flush=True)
    await runtime.shutdown()
    os._exit(0)


if __name__ == "__main__":
    mode, db_url, journal_path, tool_name = sys.argv[1:5]
    if mode == "park":
        asyncio.run(park(db_url, journal_path, tool_name))
    else:
        asyncio.run(answer(db_url, journal_path, tool_name, *sys.argv[5:7]))
