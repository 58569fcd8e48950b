"""Agents and helpers shared by the companion tests and their child-process worker.

The parent (``lead``) reads its last user row: ``send NAME: TEXT`` calls
``companion__sendMessage``, ``status NAME`` and ``end NAME`` call the other companion tools,
anything else is answered ``ok: TEXT``; after tool results it replies with the results as
JSON. The companion (``reviewer``) answers ``ask ...`` with the client tool ``ask`` (so it
parks), and anything else with ``reviewed: TEXT``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel

from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.agents import Agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.markers import is_sub_agent_notification
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime


class AskIn(BaseModel):
    question: str


class AskOut(BaseModel):
    answer: str


def lead_script(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    if last.role == "user" and not is_sub_agent_notification(last):
        text = last.content
        if text.startswith("send "):
            name, _, message = text[5:].partition(": ")
            return call(
                request, ("companion__sendMessage", {"companion": name, "message": message})
            )
        for verb in ("status", "end"):
            if text.startswith(f"{verb} "):
                return call(request, (f"companion__{verb}", {"companion": text[len(verb) + 1 :]}))
        return reply(f"ok: {text}")
    if last.role == "user":
        return reply(f"noted: {last.content}")
    results = [m.result if not m.is_error else m.error_code for m in request.messages[-1:]]
    return reply(json.dumps(results[0], sort_keys=True))


def reviewer_script(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    if last.role == "user" and last.content.startswith("ask "):
        return call(request, ("ask", {"question": last.content[4:]}))
    if last.role == "user" and last.content.startswith("publish "):
        return call(request, ("publish", {"question": last.content[8:]}))
    if last.role == "tool":
        return reply(f"answered: {last.error_code or last.content}")
    return reply(f"reviewed: {last.content}")


def _publish(arguments: AskIn) -> dict[str, str]:
    return {"published": arguments.question}


def reviewer_agent(idle_ttl: float = 30.0, llm: Any = None, **options: Any) -> Agent:
    """The persistent companion, with a client tool ``ask`` and a server tool ``publish``
    behind an approval."""
    return define_agent(
        "reviewer",
        llm=llm or ScriptedLLM(reviewer_script),
        tools=[
            define_tool("ask", "Ask the user", AskIn, AskOut, execute="client"),
            define_tool("publish", "Publish", AskIn, execute=_publish, require_approval=True),
        ],
        persistent=True,
        idle_ttl=idle_ttl,
        **options,
    )


def lead_agent(
    reviewer: Agent | None = None, delivery_timeout: float | None = None, **options: Any
) -> Agent:
    """The parent, with the reviewer as its companion."""
    return define_agent(
        "lead",
        llm=ScriptedLLM(lead_script),
        companions=[reviewer or reviewer_agent()],
        companion_delivery_timeout=delivery_timeout,
        **options,
    )


async def send_result(runtime: AgentRuntime, session_id: str) -> Any:
    """The result of the parent's last companion call, as its tool row holds it."""
    rows = [m for m in await runtime.messages(session_id) if m.role == "tool"]
    assert rows, "no tool result yet"
    return rows[-1].result


async def until(check: Any, timeout: float = 30.0, every: float = 0.05) -> Any:
    """Poll the coroutine function ``check`` until it returns a truthy value; that value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = await check()
        if found:
            return found
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(every)


async def companion_calls(runtime: AgentRuntime, session_id: str, n: int = 1) -> list[Any]:
    """The ``n`` unanswered calls of the session's tree, once there are (a companion's call
    waits while its parent is between turns, where ``wait_for_pending`` gives up)."""

    async def check() -> list[Any]:
        view = await runtime.status(session_id)
        waiting = [p for p in view["pendingToolCalls"] if p.get("submittedAt") is None]
        return waiting if len(waiting) >= n else []

    found: list[Any] = await until(check)
    return found
