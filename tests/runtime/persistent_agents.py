"""A persistent agent shared by the persistent-agent tests and their child-process worker."""

from __future__ import annotations

from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.agents import Agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from tests.runtime.agents import EditIn, EditOut


def chat_script(request: LLMRequest) -> LLMResponse:
    """A user message 'N ...' calls the client tool `edit` N times; any other user message is
    echoed; after tool results it replies with this turn's results."""
    last = request.messages[-1]
    if last.role == "user":
        if last.content[:1].isdigit():
            n = int(last.content.split()[0])
            return call(request, *[("edit", {"text": f"edit-{i}"}) for i in range(n)])
        return reply(f"echo: {last.content}")
    turn: list[str] = []
    for m in reversed(request.messages):
        if m.role == "user":
            break
        if m.role == "tool":
            turn.insert(0, m.error_code or m.content)
    return reply("results: " + " | ".join(turn))


def keeper_agent(idle_ttl: float = 30.0, timeout: float | None = None) -> Agent:
    """A persistent agent with one client tool, `edit`."""
    return define_agent(
        "keeper",
        llm=ScriptedLLM(chat_script),
        instructions="Keep a conversation going.",
        tools=[define_tool("edit", "Apply an edit", EditIn, EditOut, execute="client")],
        client_tool_timeout=timeout,
        persistent=True,
        idle_ttl=idle_ttl,
    )
