"""A child process for the approval crash test.

``park URL``: launch a runtime (fixed executor id and version), start a turn whose model calls
the approval-gated tool ``transfer``, print one JSON line ``{session, toolCallId, approvalId}``
once the approval is pending, then wait to be killed.

``approve URL SESSION CALL APPROVAL``: launch with the SAME executor id and version (launch
recovers the parked turn), submit the approval, wait for the turn to end, print one JSON line
with the session's status and its last message, and exit.

The tool appends one line per execution to the file named by ``APPROVAL_TOOL_LOG``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from dbos import DBOS
from pydantic import BaseModel

from helix_dbos.config import HelixSettings
from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.agents import Agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime

EXECUTOR = "approval-crash-exec"
VERSION = "approval-crash-1"
TOOL_LOG_ENV = "APPROVAL_TOOL_LOG"


class Transfer(BaseModel):
    amount: int
    to: str


def transfer(args: Transfer) -> dict[str, object]:
    """The gated tool: records each execution (pid and arguments) in the log file."""
    with open(os.environ[TOOL_LOG_ENV], "a", encoding="utf-8") as log:
        log.write(json.dumps({"pid": os.getpid(), "amount": args.amount, "to": args.to}) + "\n")
    return {"transferred": args.amount, "to": args.to}


def script(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    if last.role == "user":
        return call(request, ("transfer", {"amount": 40, "to": "alice"}))
    return reply(f"tool said: {last.content}")


def banker() -> Agent:
    return define_agent(
        "banker",
        llm=ScriptedLLM(script),
        tools=[
            define_tool(
                "transfer",
                "Move money",
                Transfer,
                execute=transfer,
                require_approval=True,
                client_tool_timeout=300,
            )
        ],
    )


def settings(url: str) -> HelixSettings:
    return HelixSettings(database_url=url, executor_id=EXECUTOR, application_version=VERSION)


async def park(url: str) -> None:
    runtime = AgentRuntime([banker()], settings(url))
    await runtime.launch()
    handle = await runtime.start("banker", "pay alice")
    [pending] = await runtime.wait_for_pending(handle.session_id)
    print(
        json.dumps(
            {
                "session": handle.session_id,
                "toolCallId": pending["toolCallId"],
                "approvalId": pending["approvalId"],
                "pid": os.getpid(),
            }
        ),
        flush=True,
    )
    await asyncio.sleep(3600)


async def approve(url: str, session: str, tool_call_id: str, approval_id: str) -> None:
    runtime = AgentRuntime([banker()], settings(url))
    await runtime.launch()
    answer = await runtime.submit_tool_result(
        session,
        tool_call_id,
        kind="approval-response",
        approval_id=approval_id,
        approved=True,
        shown_input={"amount": 40, "to": "alice"},
    )
    view = await runtime.wait(session, timeout=60)
    workflow_id = (await runtime.session(session)).workflow_id
    workflow = await DBOS.get_workflow_status_async(workflow_id) if workflow_id else None
    for _ in range(500):  # the session ends inside the workflow, just before its output
        if workflow is None or workflow.status not in ("PENDING", "ENQUEUED"):
            break
        await asyncio.sleep(0.02)
        assert workflow_id is not None
        workflow = await DBOS.get_workflow_status_async(workflow_id)
    history = await runtime.messages(session)
    print(
        json.dumps(
            {
                "answer": answer.dump(),
                "status": view["status"],
                "workflow": workflow.status if workflow else None,
                "last": history[-1].content,
                "toolResults": [m.result for m in history if m.role == "tool"],
            }
        ),
        flush=True,
    )
    await runtime.shutdown()
    os._exit(0)


if __name__ == "__main__":
    mode, db_url = sys.argv[1], sys.argv[2]
    if mode == "park":
        asyncio.run(park(db_url))
    else:
        asyncio.run(approve(db_url, *sys.argv[3:6]))
