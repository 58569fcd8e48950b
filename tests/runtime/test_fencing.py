"""Fenced transitions: a recorded stop wins over every step in flight.

Each step of a turn commits only while the session is still on the step's run, in an active
status; otherwise it writes nothing and the turn ends. These tests stop a turn while its step
is running (the model call held open) and release the step afterwards.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helix_dbos.core.llm import LLMRequest, LLMResponse, TextSink
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime
from tests.support.agent_tree import tree
from tests.support.asker import asker, parked, script
from tests.support.in_flight import InFlight


class GatedLLM(ScriptedLLM):
    """A scripted model whose calls wait at a gate while ``hold`` is set."""

    def __init__(self) -> None:
        super().__init__(script)
        self.hold = False
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        if self.hold:
            self.entered.set()
            await self.release.wait()
        return await super().complete(request, on_text)


async def events_of(rt: AgentRuntime, session_id: str) -> list[str]:
    return [e.type for e in await rt.events(session_id)]


async def test_interrupt_during_the_model_step_of_a_call_ends_interrupted(
    make_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model answers with a client call AFTER the stop: its commit is fenced, so the
    session stays interrupted with no pending call, ownership or assistant message, and the
    next start works."""
    llm = GatedLLM()
    rt = await make_runtime([asker(llm)])
    in_flight = InFlight(rt, monkeypatch)
    llm.hold = True
    handle = await rt.start("asker", "ask")
    await asyncio.wait_for(llm.entered.wait(), timeout=30)

    stopped = await rt.interrupt(handle.session_id)
    assert stopped.status == "interrupted"
    llm.release.set()
    # The released step has tried its commit (fenced) and the stopped turn has ended. The
    # stopped workflow is cancelled: there is no result to wait for.
    await in_flight.settled()

    state = await rt.session(handle.session_id)
    assert state.status == "interrupted"
    assert state.pending == {} and state.ownership == {}
    assert [m.role for m in await rt.messages(handle.session_id)] == ["user"]
    assert (await events_of(rt, handle.session_id)).count("turn_end") == 1

    llm.hold = False
    nxt = await rt.start("asker", "hello", session_id=handle.session_id)
    assert (await rt.wait(nxt.session_id))["status"] == "completed"


async def test_interrupt_during_the_final_model_step_never_ends_completed(
    make_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop recorded while the final answer is being generated wins: the session ends
    ``interrupted`` with one ``turn_end``, never ``completed`` with two."""
    llm = GatedLLM()
    rt = await make_runtime([asker(llm)])
    in_flight = InFlight(rt, monkeypatch)
    sid, [pending] = await parked(rt)
    llm.hold = True
    await rt.submit_tool_result(sid, pending["toolCallId"], result={"text": "blue"})
    await asyncio.wait_for(llm.entered.wait(), timeout=30)

    await rt.interrupt(sid)
    llm.release.set()
    # The final step (started by the submit's batch job, or by the woken turn) has tried its
    # commit, or was stopped with the turn that would have taken it (``handover.drop``).
    await in_flight.settled()

    state = await rt.session(sid)
    assert state.status == "interrupted"
    assert (await events_of(rt, sid)).count("turn_end") == 1
    assert [m.role for m in await rt.messages(sid)] == ["user", "assistant", "tool"]


async def test_a_submit_after_the_stop_is_refused_and_stores_nothing(make_runtime: Any) -> None:
    """The stop clears the call in the transaction that records it: a submit that reads the
    session afterwards answers ``run_stopped``."""
    rt = await make_runtime([asker(ScriptedLLM(script))])
    sid, [pending] = await parked(rt)
    await rt.interrupt(sid)
    answer = await rt.submit_tool_result(sid, pending["toolCallId"], result={"text": "late"})
    assert answer.status == "unknown_tool_call" and answer.reason == "run_stopped"
    assert [m.role for m in await rt.messages(sid)] == ["user", "assistant"]


async def test_interrupt_racing_submits_leaves_nothing_stuck(
    make_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupts and submits fired together on 20 parked sessions: every session ends
    interrupted or completed, none stays active, none has two ``turn_end`` events, and an
    interrupt that answered ``interrupted`` is never followed by ``completed``."""
    rt = await make_runtime([asker(ScriptedLLM(script))])
    in_flight = InFlight(rt, monkeypatch)
    parked_sessions = [await parked(rt) for _ in range(20)]

    async def race(sid: str, call: dict[str, Any]) -> str:
        submit = rt.submit_tool_result(sid, call["toolCallId"], result={"text": "x"})
        stop = rt.interrupt(sid)
        _, stopped = await asyncio.gather(submit, stop)
        return str(stopped.status)

    said = await asyncio.gather(*(race(sid, calls[0]) for sid, calls in parked_sessions))
    # Every turn has ended and every job and model step the submits started has committed
    # or been fenced: nothing can complete a session after this.
    await in_flight.settled()
    for (sid, _), answer in zip(parked_sessions, said, strict=True):
        view = await rt.wait(sid, until=("completed", "interrupted"), timeout=30)
        if answer == "interrupted":
            assert view["status"] == "interrupted", sid
        assert view["pendingToolCalls"] == []
        assert (await events_of(rt, sid)).count("turn_end") == 1, sid
    nxt = await rt.start("asker", "hello", session_id=parked_sessions[0][0])
    assert (await rt.wait(nxt.session_id))["status"] == "completed"


async def test_a_stopped_parent_creates_no_sub_agent(
    make_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start of a sub-agent is fenced on its parent: a parent stopped while its model
    step runs never creates the child session."""
    root_agent, llms = tree()
    gate = asyncio.Event()
    entered = asyncio.Event()
    root_llm = llms["root"]
    original = root_llm.complete

    async def held(request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        entered.set()
        await gate.wait()
        return await original(request, on_text)

    root_llm.complete = held  # type: ignore[method-assign]
    rt = await make_runtime([root_agent])
    in_flight = InFlight(rt, monkeypatch)
    handle = await rt.start("root", "go")
    await asyncio.wait_for(entered.wait(), timeout=30)
    await rt.interrupt(handle.session_id)
    gate.set()
    await in_flight.settled()  # the parent's step has tried its commit; its turn has ended
    assert await rt.store.descendants(handle.session_id) == []
    assert llms["child"].calls == 0


async def test_a_turn_failure_shows_a_code_and_a_fixed_message(make_runtime: Any) -> None:
    """An exception's text (here a driver's SQL and parameters) never reaches the session's
    error or its ``turn_end`` event; it goes to the log."""
    from helix_dbos.testing import capture_log_events

    def leaky(request: LLMRequest) -> LLMResponse:
        raise RuntimeError("SELECT secret FROM vault WHERE token = 'hunter2'")

    rt = await make_runtime([asker(ScriptedLLM(leaky))])
    with capture_log_events() as logged:
        handle = await rt.start("asker", "ask")
        view = await rt.wait(handle.session_id)
    assert view["status"] == "failed"
    assert view["error"] == {
        "code": "framework_internal_error",
        "message": "An internal error ended the turn.",
        "retryable": False,
    }
    streamed = [e.data for e in await rt.events(handle.session_id) if e.type == "turn_end"]
    assert "hunter2" not in repr(streamed) and "SELECT" not in repr(streamed)
    details = [e for e in logged if e["event"] == "turn.error_detail"]
    assert details and "hunter2" in details[0]["detail"]
