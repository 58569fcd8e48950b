"""A new message over pending client calls, and which resumes a session accepts.

``resume(with_message, abandon_pending=True)`` is ONE entry: the stored answers are kept, every
unanswered call is closed ``client_tool_abandoned``, the message lands after the results, and
exactly one model call follows. Without ``abandon_pending`` a partial batch is refused
(retryable, naming the awaited calls) and nothing is written.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from helix_dbos.core.agents import define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse, TextSink
from helix_dbos.core.messages import Message
from helix_dbos.core.tools import define_tool
from helix_dbos.errors import AgentNotResumableError
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime
from helix_dbos.testing import capture_log_events
from tests.runtime.wakeups import lose_answer_wakeups

NEW_MESSAGE = "never mind, do Y instead"


class Pick(BaseModel):
    question: str


class Picked(BaseModel):
    answer: str


def two_questions(request: LLMRequest) -> LLMResponse:
    """The first user message asks two client questions in one batch; anything else replies."""
    last = request.messages[-1]
    if last.role == "user" and last.content == "start":
        return call(request, ("pick", {"question": "one"}), ("pick", {"question": "two"}))
    return reply(f"saw {len(request.messages)} messages, last {last.role}: {last.content!r}")


class GatedLLM:
    """A scripted model whose calls after the first ``free`` wait for ``gate`` to open."""

    def __init__(self, inner: ScriptedLLM, free: int) -> None:
        self.inner = inner
        self.name = inner.name
        self.free = free
        self.gate = asyncio.Event()

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        if self.inner.calls >= self.free:
            await self.gate.wait()
        return await self.inner.complete(request, on_text)


def agent_with(llm: Any) -> Any:
    pick = define_tool(
        "pick", "Ask the user to pick", Pick, Picked, execute="client", client_tool_timeout=300
    )
    return define_agent("picker", llm=llm, tools=[pick])


def assert_paired(history: list[Message]) -> None:
    """Every tool_use has exactly one tool_result, right after its assistant message."""
    results = [m.tool_call_id for m in history if m.role == "tool"]
    assert len(results) == len(set(results)), f"a call has two results: {results}"
    for i, m in enumerate(history):
        if m.role != "assistant" or not m.tool_calls:
            continue
        following = history[i + 1 : i + 1 + len(m.tool_calls)]
        assert [f.role for f in following] == ["tool"] * len(m.tool_calls), history
        assert [f.tool_call_id for f in following] == [c.id for c in m.tool_calls]
    answered = {c.id for m in history if m.role == "assistant" for c in m.tool_calls}
    assert set(results) <= answered


async def parked_on_two(rt: AgentRuntime) -> tuple[str, list[dict[str, Any]]]:
    handle = await rt.start("picker", "start")
    pending = await rt.wait_for_pending(handle.session_id, count=2)
    return handle.session_id, pending


async def test_with_message_abandon_pending_is_one_entry(make_runtime: Any) -> None:
    """One call answered, one not: the answer is kept, the other abandoned, then the message,
    then exactly one model call."""
    llm = ScriptedLLM(two_questions)
    rt = await make_runtime([agent_with(llm)])
    sid, pending = await parked_on_two(rt)
    first, second = pending
    # Answer the SECOND call: the turn is parked on the first, unanswered one.
    answer = await rt.submit_tool_result(sid, second["toolCallId"], result={"answer": "blue"})
    assert answer.status == "accepted"
    assert answer.continuation is not None and answer.continuation.kind == "awaiting_batch"
    calls_before = llm.calls
    assert calls_before == 1

    handle = await rt.resume(sid, "with_message", NEW_MESSAGE, abandon_pending=True)
    view = await rt.wait(sid)
    assert view["status"] == "completed"
    assert llm.calls - calls_before == 1, "the abandoned calls and the message share ONE model call"
    assert handle.run_id == f"{(await rt.session(sid)).run_id}"

    history = await rt.messages(sid)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert_paired(history)
    by_id = {m.tool_call_id: m for m in history if m.role == "tool"}
    kept, abandoned = by_id[second["toolCallId"]], by_id[first["toolCallId"]]
    assert not kept.is_error and kept.result == {"answer": "blue"}
    assert abandoned.is_error and abandoned.error_code == "client_tool_abandoned"
    assert history[4].content == NEW_MESSAGE
    # The one model call after the resume saw the results, then the message, last.
    seen = llm.requests[-1].messages
    assert [m.role for m in seen] == ["user", "assistant", "tool", "tool", "user"]
    assert seen[-1].content == NEW_MESSAGE

    state = await rt.session(sid)
    assert state.pending == {} and state.ownership == {}
    assert "entryInput" not in state.metadata
    assert state.completed[first["toolCallId"]].outcome == "abandoned"
    assert state.completed[second["toolCallId"]].outcome == "answered"
    # A late answer to the abandoned call is answered from its tombstone and changes nothing.
    late = await rt.submit_tool_result(sid, first["toolCallId"], result={"answer": "red"})
    assert late.status == "already_completed"
    assert late.continuation is not None and late.continuation.kind == "consumed"
    assert len(await rt.messages(sid)) == len(history)


async def test_abandon_wakes_a_turn_parked_on_an_answer_whose_wake_was_lost(
    make_runtime: Any, monkeypatch: Any
) -> None:
    """The first call's answer is stored but its ``send`` failed, so the turn still waits on
    the first call's topic: the abandon must wake it there, and the stored answer is kept."""
    llm = ScriptedLLM(two_questions)
    rt = await make_runtime([agent_with(llm)])
    sid, (first, second) = await parked_on_two(rt)
    lose_answer_wakeups(rt, monkeypatch)
    with capture_log_events() as logged:
        answer = await rt.submit_tool_result(sid, first["toolCallId"], result={"answer": "blue"})
    assert answer.status == "accepted"
    assert [e for e in logged if e["event"] == "client_tool.send_event_failed"]
    assert (await rt.session(sid)).pending[first["toolCallId"]].submitted_at is not None

    await rt.resume(sid, "with_message", NEW_MESSAGE, abandon_pending=True)
    assert (await rt.wait(sid, timeout=10))["status"] == "completed"
    history = await rt.messages(sid)
    assert_paired(history)
    results = {m.tool_call_id: m for m in history if m.role == "tool"}
    assert results[first["toolCallId"]].result == {"answer": "blue"}
    assert results[second["toolCallId"]].error_code == "client_tool_abandoned"
    assert history[-2].content == NEW_MESSAGE and llm.calls == 2


async def test_partial_batch_refuses_with_message_and_continue_until_complete(
    make_runtime: Any,
) -> None:
    """On a partial batch, ``with_message`` without ``abandon_pending`` and ``continue`` are
    refused (retryable, naming the awaited calls) and write nothing; once the batch is
    complete, ``continue`` is accepted and adopts the turn that continues."""
    inner = ScriptedLLM(two_questions)
    llm = GatedLLM(inner, free=1)  # the continuation's model call waits for the gate
    rt = await make_runtime([agent_with(llm)])
    sid, pending = await parked_on_two(rt)
    first, second = (p["toolCallId"] for p in pending)

    with pytest.raises(AgentNotResumableError) as nothing_answered:
        await rt.resume(sid, "continue")
    assert nothing_answered.value.code == "state_not_resumable"
    assert nothing_answered.value.details["awaitedToolCallIds"] == [first, second]

    await rt.submit_tool_result(sid, first, result={"answer": "blue"})
    before = await rt.session(sid)
    history = await rt.messages(sid)
    events = await rt.events(sid)

    with pytest.raises(AgentNotResumableError) as refused:
        await rt.resume(sid, "with_message", NEW_MESSAGE)
    assert refused.value.code == "state_not_resumable" and refused.value.retryable is True
    assert refused.value.details["awaitedToolCallIds"] == [second]
    assert second in refused.value.message
    with pytest.raises(AgentNotResumableError) as partial:
        await rt.resume(sid, "continue")
    assert partial.value.code == "state_not_resumable" and partial.value.retryable is True
    assert partial.value.details["awaitedToolCallIds"] == [second]

    after = await rt.session(sid)
    assert after.version == before.version and after.metadata == before.metadata
    assert await rt.messages(sid) == history
    assert len(await rt.events(sid)) == len(events)
    assert inner.calls == 1

    last = await rt.submit_tool_result(sid, second, result={"answer": "red"})
    assert last.continuation is not None and last.continuation.kind == "new_run"
    handle = await rt.resume(sid, "continue")  # the parked turn continues; this adopts it
    assert handle.session_id == sid
    assert handle.run_id == last.continuation.run_id == f"{before.run_id}:continuation"
    llm.gate.set()
    assert (await rt.wait(sid))["status"] == "completed"
    assert inner.calls == 2, "continue adopted the running turn; it started no second one"
    final = await rt.messages(sid)
    assert_paired(final)
    assert not any(m.content == NEW_MESSAGE for m in final), "the refused message was not kept"


async def test_completed_and_failed_sessions_are_not_resumable(make_runtime: Any) -> None:
    llm = ScriptedLLM(two_questions)
    rt = await make_runtime([agent_with(llm)])
    done = await rt.start("picker", "hello")  # no tool call: completes at once
    assert (await rt.wait(done.session_id))["status"] == "completed"
    sid, _ = await parked_on_two(rt)
    await rt.abort(sid, "operator stop")
    assert (await rt.session(sid)).status == "failed"

    for session_id in (done.session_id, sid):
        before = await rt.session(session_id)
        for mode, message in (("continue", None), ("with_message", NEW_MESSAGE)):
            with pytest.raises(AgentNotResumableError) as refused:
                await rt.resume(session_id, mode, message)
            assert refused.value.code == "state_not_resumable"
            assert refused.value.retryable is False
        after = await rt.session(session_id)
        assert after.version == before.version and after.status == before.status
