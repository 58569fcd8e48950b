"""The agents the AG-UI tests serve (in process, and with ``helix-dbos serve tests.agui.agents:agents``).

``assistant`` is scripted (a function of the conversation, so a restarted process agrees with
the one it replaces). It has the demo editor's client tool ``editContent`` and approval-gated
``publishDocument``, a server tool ``lookupWord`` and a sub-agent ``speller``:

    replace "a" with "b"                  one editContent call (every edit in it)
    replace "a" with "b" ... separately   one editContent call per edit, in one step (a batch)
    publish                               publishDocument (a human approves it first)
    look up WORD                          lookupWord, a server tool
    ask the speller                       the sub-agent speller
    ask the helper                        the sub-agent helper, which calls editContent itself
    slowly ...                            the first model call takes SLOW_SECONDS
    please fail                           the model call fails (provider_bad_request)
    anything else                         "You said: <message>"

After the tools ran, the reply lists each result of the turn: ``Done: <result> | <result>``.
"""

from __future__ import annotations

import asyncio
import re

from pydantic import BaseModel

from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.agents import Agent
from helix_dbos.core.llm import LLMRequest, LLMResponse, TextSink
from helix_dbos.core.messages import Message
from helix_dbos.demo import EDIT_CONTENT, PUBLISH_DOCUMENT, edits_for
from helix_dbos.errors import ProviderError
from helix_dbos.llm.scripted import ScriptedLLM, call, reply

#: How long the first model call of a "slowly" message takes.
SLOW_SECONDS = 3.0

_LOOK_UP = re.compile(r"\blook up (\w+)", re.IGNORECASE)


class LookupIn(BaseModel):
    word: str


class LookupOut(BaseModel):
    word: str
    length: int


def _lookup(args: LookupIn) -> LookupOut:
    return LookupOut(word=args.word, length=len(args.word))


LOOKUP_WORD = define_tool(
    "lookupWord", "Look a word up (runs on the server).", LookupIn, LookupOut, execute=_lookup
)


def _this_turn(messages: list[Message]) -> list[Message]:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            return messages[i + 1 :]
    return messages


def assistant_script(request: LLMRequest) -> LLMResponse:
    """The assistant's answer to its conversation (see the module docstring)."""
    messages = request.messages
    last = messages[-1]
    if last.role != "user":
        results = [m.content for m in _this_turn(messages) if m.role == "tool"]
        return reply("Done: " + " | ".join(results))
    text = last.content
    edits = edits_for(text)
    if edits and "separately" in text:
        return call(request, *[("editContent", {"edits": [edit]}) for edit in edits])
    if edits:
        return call(request, ("editContent", {"edits": edits}))
    if "publish" in text.lower():
        return call(request, ("publishDocument", {"documentId": "doc-1"}))
    found = _LOOK_UP.search(text)
    if found:
        return call(request, ("lookupWord", {"word": found.group(1)}))
    if "ask the speller" in text.lower():
        return call(request, ("subagent__speller", {"message": "spell it"}))
    if "ask the helper" in text.lower():
        return call(request, ("subagent__helper", {"message": "edit it"}))
    return reply(f"You said: {text}")


class _SlowWhenAsked:
    """The scripted model; the first call of a turn whose message says "slowly" takes a while
    (so a test can stop the turn while a model call runs)."""

    name = "agui-test"

    def __init__(self) -> None:
        self._model = ScriptedLLM(assistant_script, name=self.name)

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        last = request.messages[-1] if request.messages else None
        if last is not None and last.role == "user" and "slowly" in last.content:
            await asyncio.sleep(SLOW_SECONDS)
        if last is not None and last.role == "user" and "please fail" in last.content:
            raise ProviderError("The request was rejected", code="provider_bad_request")
        return await self._model.complete(request, on_text)


speller = define_agent("speller", llm=ScriptedLLM(lambda _request: reply("s-p-e-l-l-e-d")))


def helper_script(request: LLMRequest) -> LLMResponse:
    """The sub-agent ``helper`` asks the client for an edit, then reports its result."""
    last = request.messages[-1]
    if last.role == "user":
        edit = {"selector": "x", "replacement": "y"}
        return call(request, ("editContent", {"edits": [edit]}))
    return reply(f"helped: {last.content}")


helper = define_agent("helper", llm=ScriptedLLM(helper_script), tools=[EDIT_CONTENT])


def assistant_agent(client_tool_timeout: float | None = None) -> Agent:
    """The ``assistant`` agent (a fresh model each time)."""
    return define_agent(
        "assistant",
        llm=_SlowWhenAsked(),
        instructions="Edit, publish, look up and delegate as asked.",
        tools=[EDIT_CONTENT, PUBLISH_DOCUMENT, LOOKUP_WORD],
        subagents=[speller, helper],
        client_tool_timeout=client_tool_timeout,
    )


#: What ``helix-dbos serve tests.agui.agents:agents`` serves.
agents = [assistant_agent()]
