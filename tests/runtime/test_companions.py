"""Companions: definition checks, the send's delivery outcomes, replies as notifications.

Each outcome of the delivery union is produced by a real situation, on Postgres and SQLite:
a first send (its own workflow started), a send to the live workflow (taken from its inbox),
a companion parked on a client call (``child_busy``), an empty message (``child_entry_failed``),
an ended companion (``child_exited``), an aborted one (``child_not_running``), an unknown name
(``no_resume_config``), and a companion whose workflow is of a release no process runs
(``child_start_unconfirmed``); one whose process is gone is adopted by the send.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dbos import DBOS

from helix_dbos.config import HelixSettings
from helix_dbos.core import define_agent
from helix_dbos.core.markers import is_sub_agent_notification
from helix_dbos.errors import ToolDefinitionError
from helix_dbos.llm.scripted import ScriptedLLM, reply
from helix_dbos.runtime import AgentRuntime, names, records
from tests.runtime.conftest import MakeRuntime
from tests.support.companions import companion_calls, lead_agent, send_result, until


def test_companions_are_checked_at_definition() -> None:
    """A companion must be persistent; a name taken twice and a cycle are refused; the
    parent gets the companion tools."""
    llm = ScriptedLLM(lambda r: reply("x"))
    mate = define_agent("mate", llm=llm, persistent=True)
    lead = define_agent("lead", llm=llm, companions=[mate])
    assert [t.name for t in lead.tools] == [
        "companion__sendMessage",
        "companion__status",
        "companion__end",
    ]
    assert lead.companion_delivery_timeout == 60.0
    with pytest.raises(ToolDefinitionError, match="persistent"):
        define_agent("lead", llm=llm, companions=[define_agent("plain", llm=llm)])
    with pytest.raises(ToolDefinitionError, match="taken twice"):
        define_agent("lead", llm=llm, companions=[mate, mate])
    with pytest.raises(ToolDefinitionError, match="taken twice"):
        define_agent("lead", llm=llm, companions=[mate], subagents=[mate])
    # A cycle by name: the companion's own companion is called like the parent.
    inner = define_agent("lead", llm=llm, persistent=True)
    outer = define_agent("mate", llm=llm, persistent=True, companions=[inner])
    with pytest.raises(ToolDefinitionError, match="cycle"):
        define_agent("lead", llm=llm, companions=[outer])
    with pytest.raises(ToolDefinitionError, match="companion_delivery_timeout"):
        define_agent("lead", llm=llm, companions=[mate], companion_delivery_timeout=0)
    assert not [t for t in define_agent("solo", llm=llm).tools]


async def _say(runtime: AgentRuntime, text: str, session_id: str | None = None) -> tuple[str, Any]:
    """Start (or continue) the parent with ``text``; its session and last tool result."""
    handle = await runtime.start("lead", text, session_id=session_id)
    outcome = await handle.result()
    assert outcome["outcome"] == "completed", outcome
    return handle.session_id, await send_result(runtime, handle.session_id)


async def _idle(runtime: AgentRuntime, session_id: str) -> Any:
    async def check() -> Any:
        state = await runtime.session(session_id)
        return state if state.status not in ("running", "suspended_client_tool") else None

    return await until(check)


async def test_a_first_send_starts_the_companion_and_its_reply_comes_back(
    make_runtime: MakeRuntime,
) -> None:
    """The first send creates the companion's session under the parent's root, starts its
    workflow and answers delivered; the reply reaches the parent as a notification and a
    ``companion_message`` event; a second send goes to the live workflow's inbox."""
    runtime = await make_runtime([lead_agent()])
    sid, result = await _say(runtime, "send reviewer: check the intro")
    mate_id = names.companion_session_id(sid, "reviewer")
    assert result["delivered"] is True and result["companionSessionId"] == mate_id
    mate = await _idle(runtime, mate_id)
    assert (mate.parent_session_id, mate.root_session_id, mate.agent_type) == (
        sid,
        sid,
        "reviewer",
    )
    first_workflow = mate.workflow_id
    assert first_workflow == names.persistent_workflow_id(mate_id, result["runId"])
    parent = await runtime.session(sid)
    assert parent.metadata[records.COMPANIONS_KEY]["reviewer"]["sessionId"] == mate_id

    async def replied() -> list[Any]:
        return [e for e in await runtime.events(sid) if e.type == "companion_message"]

    [reply_event] = await until(replied)
    assert reply_event.data["text"] == "reviewed: check the intro"
    assert reply_event.data["companionSessionId"] == mate_id
    # The parent's turn may still have run when the reply came: then its next entry appends
    # it, before its message.
    _, second = await _say(runtime, "send reviewer: and the outro", sid)
    assert second["delivered"] is True
    mate = await _idle(runtime, mate_id)
    assert mate.workflow_id == first_workflow  # taken from the live workflow's inbox
    await until(lambda: _count(runtime, sid, 2))
    await _say(runtime, "hello", sid)
    notes = [m for m in await runtime.messages(sid) if is_sub_agent_notification(m)]
    assert [m.content for m in notes] == [
        "[companion reviewer] reviewed: check the intro",
        "[companion reviewer] reviewed: and the outro",
    ]
    assert all(m.meta and m.meta["childSessionId"] == mate_id for m in notes)
    assert records.COMPANION_NOTICES_KEY not in (await runtime.session(sid)).metadata


async def _count(runtime: AgentRuntime, sid: str, n: int) -> bool:
    return len([e for e in await runtime.events(sid) if e.type == "companion_message"]) >= n


async def test_a_companion_mid_turn_answers_child_busy(make_runtime: MakeRuntime) -> None:
    """A companion parked on a client call is mid-turn: a send answers child_busy and
    writes nothing; its call is answered on the parent's root, and the next send delivers."""
    runtime = await make_runtime([lead_agent()])
    sid, first = await _say(runtime, "send reviewer: ask which chapter")
    assert first["delivered"] is True
    mate_id = names.companion_session_id(sid, "reviewer")
    [pending] = await companion_calls(runtime, sid)
    assert pending["ownerSessionId"] == mate_id
    before = len(await runtime.messages(mate_id))
    _, busy = await _say(runtime, "send reviewer: anything?", sid)
    assert busy == {"delivered": False, "reason": "child_busy"}
    assert len(await runtime.messages(mate_id)) == before
    # Submitted on the root, routed by the ownership map to the companion.
    await runtime.submit_tool_result(sid, pending["toolCallId"], result={"answer": "two"})
    await _idle(runtime, mate_id)
    _, again = await _say(runtime, "send reviewer: thanks", sid)
    assert again["delivered"] is True


async def test_an_empty_message_fails_the_companions_entry(make_runtime: MakeRuntime) -> None:
    """The companion's entry refuses an empty message: child_entry_failed with its detail."""
    runtime = await make_runtime([lead_agent()])
    _, result = await _say(runtime, "send reviewer:  ")
    assert result["delivered"] is False and result["reason"] == "child_entry_failed"
    assert result["errorDetail"]["code"] == "validation_failed"


async def test_an_ended_companion_answers_child_exited(make_runtime: MakeRuntime) -> None:
    """companion__end ends a companion for good: a later send answers child_exited."""
    runtime = await make_runtime([lead_agent()])
    sid, _ = await _say(runtime, "send reviewer: hi")
    mate_id = names.companion_session_id(sid, "reviewer")
    await _idle(runtime, mate_id)
    _, ended = await _say(runtime, "end reviewer", sid)
    assert ended == {"companion": "reviewer", "ended": True}
    _, status = await _say(runtime, "status reviewer", sid)
    assert status["state"] == "ended"
    _, refused = await _say(runtime, "send reviewer: still there?", sid)
    assert refused == {"delivered": False, "reason": "child_exited"}


async def test_an_aborted_companion_is_not_running_and_an_interrupted_one_resumes(
    make_runtime: MakeRuntime,
) -> None:
    """An interrupted companion is resumed by a send (a new workflow); one aborted on its own
    answers child_not_running with its error, until a message on its own session ends it."""
    runtime = await make_runtime([lead_agent()])
    sid, _ = await _say(runtime, "send reviewer: ask one")
    mate_id = names.companion_session_id(sid, "reviewer")
    await companion_calls(runtime, sid)
    await runtime.interrupt(mate_id)
    assert (await runtime.session(mate_id)).status == "interrupted"
    _, resumed = await _say(runtime, "send reviewer: once more", sid)
    assert resumed["delivered"] is True
    mate = await _idle(runtime, mate_id)
    assert mate.status == "completed"
    assert mate.workflow_id == names.persistent_workflow_id(mate_id, resumed["runId"])

    _, parked = await _say(runtime, "send reviewer: ask two", sid)
    assert parked["delivered"] is True
    await companion_calls(runtime, sid)
    await runtime.abort(mate_id, "stop it")
    _, refused = await _say(runtime, "send reviewer: hello?", sid)
    assert refused["delivered"] is False and refused["reason"] == "child_not_running"
    assert refused["errorDetail"]["code"] == "framework_cancelled"
    # A message started on the companion's own session ends the abort (the runbook's way).
    await (await runtime.start("reviewer", "back to work", session_id=mate_id)).result()
    assert (await _idle(runtime, mate_id)).status == "completed"
    _, back = await _say(runtime, "send reviewer: welcome back", sid)
    assert back["delivered"] is True


async def test_an_unknown_companion_has_no_resume_config(make_runtime: MakeRuntime) -> None:
    """A send to a companion the parent does not declare: no_resume_config, naming them."""
    runtime = await make_runtime([lead_agent()])
    _, result = await _say(runtime, "send critic: hi")
    assert result["delivered"] is False and result["reason"] == "no_resume_config"
    assert "'reviewer'" in result["errorDetail"]["message"]


def _settings(url: str, executor: str, version: str = "t") -> HelixSettings:
    # No sweep while the test runs: only the send itself may adopt.
    return HelixSettings(
        database_url=url,
        executor_id=executor,
        application_version=version,
        heartbeat_seconds=300,
        adopt_after_seconds=600,
    )


async def _live_then_gone(url: str, version: str) -> str:
    """A process whose companion is live on its inbox, stopped cleanly (its workflow stays
    PENDING, nobody runs it): the parent's session."""
    runtime = AgentRuntime([lead_agent()], _settings(url, "first", version))
    await runtime.launch()
    try:
        sid, result = await _say(runtime, "send reviewer: hi")
        assert result["delivered"] is True
        await _idle(runtime, names.companion_session_id(sid, "reviewer"))
    finally:
        await runtime.shutdown()
    return sid


async def _send_to_the_gone(
    url: str, sid: str, version: str, delivery_timeout: float
) -> dict[str, Any]:
    """From a second process of ``version``: a send to the companion; its outcome."""
    lead = lead_agent(delivery_timeout=delivery_timeout)
    runtime = AgentRuntime([lead], _settings(url, "second", version))
    await runtime.launch()
    try:
        assert runtime.fleet is not None
        runtime.fleet._live = {}  # as a sweep that has not seen the first process yet
        _, outcome = await _say(runtime, "send reviewer: are you there?", sid)
        mate = await runtime.session(names.companion_session_id(sid, "reviewer"))
        assert mate.run_id == outcome["runId"]
        if outcome["delivered"]:
            await until(lambda: _replied(runtime, sid, "reviewed: are you there?"))
        else:
            assert mate.status == "running"  # the message waits in the stranded inbox
        return dict(outcome)
    finally:
        await runtime.shutdown()


async def _replied(runtime: AgentRuntime, sid: str, text: str) -> bool:
    events = await runtime.events(sid)
    return any(e.type == "companion_message" and e.data["text"] == text for e in events)


def test_a_companion_whose_process_is_gone_is_adopted_by_the_send(db_url: str) -> None:
    """The companion's live workflow belongs to a process that is gone: the send adopts it
    at once (the fleet, as a message to a persistent session does), and it takes the message."""
    sid = asyncio.run(_live_then_gone(db_url, "t"))
    # The adoption replays the companion's workflow before it takes the message: on a loaded
    # machine that can take more than a second, so this send waits as long as a real one may.
    outcome = asyncio.run(_send_to_the_gone(db_url, sid, "t", delivery_timeout=30.0))
    assert outcome["delivered"] is True


def test_a_companion_stranded_on_another_release_is_unconfirmed(db_url: str) -> None:
    """The companion's live workflow is of a release no process runs now: nothing can take
    the message within the delivery timeout, and the send answers child_start_unconfirmed
    (the message stays its input: a process of that release takes it)."""
    sid = asyncio.run(_live_then_gone(db_url, "v1"))
    outcome = asyncio.run(_send_to_the_gone(db_url, sid, "v2", delivery_timeout=1.0))
    assert outcome["delivered"] is False and outcome["reason"] == "child_start_unconfirmed"


async def _send_then_cancel(url: str, sid: str) -> dict[str, Any]:
    """From a process of another release: a send to the stranded companion, whose workflow
    an operator cancels while the send waits for it to take the message."""
    lead = lead_agent(delivery_timeout=30.0)
    runtime = AgentRuntime([lead], _settings(url, "second", "v2"))
    await runtime.launch()
    try:
        mate_id = names.companion_session_id(sid, "reviewer")
        before = await runtime.session(mate_id)
        live = before.metadata[records.PERSISTENT_KEY]["workflowId"]
        sending = asyncio.create_task(_say(runtime, "send reviewer: still there?", sid))

        async def claimed() -> bool:
            return (await runtime.session(mate_id)).run_id != before.run_id

        await until(claimed)
        await DBOS.cancel_workflow_async(live)
        _, outcome = await asyncio.wait_for(sending, 30)
        return dict(outcome)
    finally:
        await runtime.shutdown()


def test_a_companion_whose_loop_ends_before_the_message_has_exited(db_url: str) -> None:
    """The message is in the companion's inbox, and its workflow ends (an operator cancels
    it) before it takes the message: the send answers child_exited."""
    sid = asyncio.run(_live_then_gone(db_url, "v1"))
    outcome = asyncio.run(_send_then_cancel(db_url, sid))
    assert outcome == {
        "delivered": False,
        "reason": "child_exited",
        "companionSessionId": names.companion_session_id(sid, "reviewer"),
        "runId": outcome["runId"],
    }


async def test_ending_a_companion_mid_turn_stops_its_turn(make_runtime: MakeRuntime) -> None:
    """companion__end on a companion parked on a client call stops that turn (its call is
    closed on the root) and ends it: a later send answers child_exited."""
    runtime = await make_runtime([lead_agent()])
    sid, _ = await _say(runtime, "send reviewer: ask which")
    mate_id = names.companion_session_id(sid, "reviewer")
    [call] = await companion_calls(runtime, sid)
    _, ended = await _say(runtime, "end reviewer", sid)
    assert ended == {"companion": "reviewer", "ended": True}
    mate = await runtime.session(mate_id)
    assert mate.status == "interrupted" and records.COMPANION_ENDED_KEY in mate.metadata
    assert (await runtime.status(sid))["pendingToolCalls"] == []
    late = await runtime.submit_tool_result(sid, call["toolCallId"], result={"answer": "x"})
    assert late.status == "unknown_tool_call"
    _, refused = await _say(runtime, "send reviewer: hello", sid)
    assert refused == {"delivered": False, "reason": "child_exited"}
