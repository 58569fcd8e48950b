"""A tree of three agents: ``root`` calls ``subagent__child``, ``child`` calls
``subagent__grandchild``, and ``grandchild`` asks the client (``locate``, 300 s deadline).
Each replies with the result it was given."""

from __future__ import annotations

import json

from pydantic import BaseModel

from helix_dbos.core.agents import Agent, define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.tools import define_tool
from helix_dbos.llm.scripted import ScriptedLLM, call, reply


class Locate(BaseModel):
    what: str


class Located(BaseModel):
    where: str


def _last_tool_text(request: LLMRequest) -> str:
    tool = request.messages[-1]
    if tool.is_error:
        return f"error {tool.error_code}"
    if isinstance(tool.result, dict) and "text" in tool.result:
        return str(tool.result["text"])
    return json.dumps(tool.result)


def grandchild_script(request: LLMRequest) -> LLMResponse:
    if request.messages[-1].role == "user":
        return call(request, ("locate", {"what": "the keys"}))
    return reply(f"grandchild: {_last_tool_text(request)}")


def child_script(request: LLMRequest) -> LLMResponse:
    if request.messages[-1].role == "user":
        return call(request, ("subagent__grandchild", {"message": "find the keys"}))
    return reply(f"child: {_last_tool_text(request)}")


def root_script(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    if last.role == "user" and last.content == "again":
        return reply(f"root saw {len(request.messages)} messages")
    if last.role == "user":
        return call(request, ("subagent__child", {"message": "ask your helper"}))
    return reply(f"root: {_last_tool_text(request)}")


def tree() -> tuple[Agent, dict[str, ScriptedLLM]]:
    """The root agent (the others are its sub-agents) and each agent's model, by name."""
    llms = {
        name: ScriptedLLM(script)
        for name, script in (
            ("root", root_script),
            ("child", child_script),
            ("grandchild", grandchild_script),
        )
    }
    grandchild = define_agent(
        "grandchild",
        llm=llms["grandchild"],
        tools=[
            define_tool(
                "locate",
                "Ask the client",
                Locate,
                Located,
                execute="client",
                client_tool_timeout=300,
            )
        ],
    )
    child = define_agent("child", llm=llms["child"], subagents=[grandchild])
    root = define_agent("root", llm=llms["root"], subagents=[child])
    return root, llms
