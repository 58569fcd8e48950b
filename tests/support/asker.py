"""The ``asker`` agent: one client call (``ask_user``) with a far deadline, and its turns
started and waited for until their coroutine is inside ``recv``."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from helix_dbos.core.agents import define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.tools import define_tool
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime
from helix_dbos.runtime._commits.opening import open_turn

#: Seconds ``ask_user`` waits for its answer: long enough that only a stop frees a turn.
DEADLINE = 300.0


class Ask(BaseModel):
    question: str


class Answer(BaseModel):
    text: str


def script(request: LLMRequest) -> LLMResponse:
    """'ask' asks the client once, 'ask twice' twice in one batch; anything else replies with
    what the model saw."""
    last = request.messages[-1]
    if last.role == "user" and last.content == "ask":
        return call(request, ("ask_user", {"question": "color?"}))
    if last.role == "user" and last.content == "ask twice":
        return call(
            request, ("ask_user", {"question": "color?"}), ("ask_user", {"question": "size?"})
        )
    return reply(f"saw {[m.role for m in request.messages]}")


def asker(llm: ScriptedLLM) -> Any:
    """The ``asker`` agent on ``llm`` (``script`` for the usual answers)."""
    return define_agent(
        "asker",
        llm=llm,
        tools=[
            define_tool(
                "ask_user",
                "Ask the user",
                Ask,
                Answer,
                execute="client",
                client_tool_timeout=DEADLINE,
            )
        ],
    )


async def claim_without_workflow(
    rt: AgentRuntime, session_id: str, message: str, turn_id: str = "run_lost0000000000000000"
) -> str:
    """Commit an ``asker`` turn's claim and entry as ``start`` does, then "crash" before its
    workflow starts; its run id."""
    await rt.store.transact(
        lambda: open_turn(
            rt.store,
            session_id=session_id,
            agent_type="asker",
            turn_id=turn_id,
            message=message,
        )
    )
    return turn_id


async def parked(
    rt: AgentRuntime, message: str = "ask", count: int = 1, session_id: str | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """Start a turn and wait until its coroutine is inside ``recv``."""
    handle = await rt.start("asker", message, session_id=session_id)
    pending = await rt.wait_for_pending(handle.session_id, count=count)
    workflow_id = (await rt.session(handle.session_id)).workflow_id
    assert workflow_id is not None
    await inside_recv(rt, workflow_id)
    return handle.session_id, pending


async def inside_recv(rt: AgentRuntime, workflow_id: str) -> None:
    """Wait until the turn ``workflow_id`` is inside its park (its ``recv`` waits in this
    process: its batch is published as it parks)."""
    for _ in range(3000):
        if workflow_id in rt.ctx.parked:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{workflow_id} never parked")
