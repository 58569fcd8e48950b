"""The agent of the lifecycle tests and their child-process worker.

A user message "N edits" calls the client tool ``edit`` N times in one step; tool results get
``results: ...``; any other message gets ``echo: <text>``. A message containing ``fail`` makes
the model fail (non-retryable) while ``FAILING`` holds it (after the server tool ``lookup``
ran, for a message with ``lookup``); a conversation with a user message containing
``hang`` makes the model wait forever while ``HANGING`` holds it (a crash test kills the process there).
"""

from __future__ import annotations

import asyncio

from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.agents import Agent
from helix_dbos.core.llm import LLMRequest, LLMResponse, TextSink
from helix_dbos.errors import ProviderError
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from tests.runtime.agents import EditIn, EditOut

FAILING = {"on": True}
HANGING = {"on": False}


def script(request: LLMRequest) -> LLMResponse:
    last = request.messages[-1]
    said = next(m.content for m in reversed(request.messages) if m.role == "user")
    after_lookup = last.role == "tool" and "lookup" in said
    if "fail" in said and FAILING["on"] and (after_lookup or "lookup" not in said):
        raise ProviderError("the provider is down", code="provider_error", retryable=False)
    if last.role == "user":
        if "lookup" in last.content and last.content == said:
            return call(request, ("lookup", {"text": last.content}))
        if last.content[:1].isdigit() and "edit" in last.content:
            n = int(last.content.split()[0])
            return call(request, *[("edit", {"text": f"edit-{i}"}) for i in range(n)])
        return reply(f"echo: {last.content}")
    seen = [m.error_code or m.content for m in request.messages if m.role == "tool"]
    return reply("results: " + " | ".join(seen))


class LifecycleLLM(ScriptedLLM):
    """``script``, plus a model call that hangs while ``HANGING`` is on."""

    def __init__(self) -> None:
        super().__init__(script)
        self.hung = asyncio.Event()

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        said = [m.content for m in request.messages if m.role == "user"]
        if HANGING["on"] and any("hang" in text for text in said):
            self.hung.set()
            await asyncio.Event().wait()
        return await super().complete(request, on_text)


def _lookup(args: EditIn) -> dict[str, str]:
    return {"found": args.text}


def lifecycle_agent(llm: ScriptedLLM | None = None) -> Agent:
    """The agent (``lc``)."""
    return define_agent(
        "lc",
        llm=llm or LifecycleLLM(),
        tools=[
            define_tool("edit", "Apply an edit", EditIn, EditOut, execute="client"),
            define_tool("lookup", "Look something up", EditIn, execute=_lookup),
        ],
        client_tool_timeout=300,
    )
