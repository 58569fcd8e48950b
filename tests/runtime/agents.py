"""Agents shared by the runtime tests and their child-process workers."""

from __future__ import annotations

from pydantic import BaseModel, Field

from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.agents import Agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply


class EditIn(BaseModel):
    text: str


class EditOut(BaseModel):
    applied: int = Field(ge=0)
    failed: int = Field(default=0, ge=0)


def batch_script(request: LLMRequest) -> LLMResponse:
    """A user message 'N ...' calls the client tool `edit` N times in one step; then replies
    with the results it saw, in order."""
    last = request.messages[-1]
    if last.role == "user":
        n = int(last.content.split()[0]) if last.content[:1].isdigit() else 1
        return call(request, *[("edit", {"text": f"edit-{i}"}) for i in range(n)])
    seen = [m for m in request.messages if m.role == "tool"]
    parts = [m.error_code or m.content for m in seen]
    return reply("results: " + " | ".join(parts))


def editor_agent(timeout: float | None = None, llm: ScriptedLLM | None = None) -> Agent:
    """An agent with one client tool, `edit`."""
    return define_agent(
        "editor",
        llm=llm or ScriptedLLM(batch_script),
        instructions="Edit documents.",
        tools=[define_tool("edit", "Apply an edit", EditIn, EditOut, execute="client")],
        client_tool_timeout=timeout,
    )
