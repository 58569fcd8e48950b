"""Durable turns with client-executed tools: suspend, submit, continue (real DBOS)."""

from __future__ import annotations

import asyncio
import json

import pytest
import sqlalchemy as sa

from helix_dbos.errors import InvalidResultError, PayloadTooLargeError
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime
from helix_dbos.store.schema import messages
from tests.runtime.agents import batch_script, editor_agent
from tests.runtime.conftest import MakeRuntime


async def _tool_rows(runtime: AgentRuntime, session_id: str) -> list[str]:
    async with runtime.store.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.select(messages.c.tool_call_id).where(
                    messages.c.session_id == session_id, messages.c.role == "tool"
                )
            )
        ).all()
    return [r.tool_call_id for r in rows]


async def test_single_call_round_trip(make_runtime: MakeRuntime) -> None:
    """start -> suspended -> submit -> completed, and the model receives the result."""
    llm = ScriptedLLM(batch_script)
    runtime = await make_runtime([editor_agent(llm=llm)])
    handle = await runtime.start("editor", "1 edit please")
    pending = await runtime.wait_for_pending(handle.session_id)
    status = await runtime.status(handle.session_id)
    assert status["status"] == "suspended_client_tool"
    assert pending[0]["toolName"] == "edit" and pending[0]["kind"] == "client"

    answer = await runtime.submit_tool_result(
        handle.session_id, pending[0]["toolCallId"], result={"applied": 3, "failed": 0}
    )
    assert answer.status == "accepted"
    assert answer.continuation is not None and answer.continuation.kind == "new_run"
    view = await runtime.wait(handle.session_id)
    assert view["status"] == "completed"
    assert view["runId"] == answer.continuation.run_id
    tool_msg = [m for m in llm.requests[-1].messages if m.role == "tool"]
    assert tool_msg[0].result == {"applied": 3, "failed": 0}
    history = await runtime.messages(handle.session_id)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    types = [e.type for e in await runtime.events(handle.session_id)]
    assert types[0] == "turn_start" and types[-1] == "turn_end"
    assert "tool_start" in types and "tool_end" in types


async def test_batch_of_three_submitted_one_at_a_time(make_runtime: MakeRuntime) -> None:
    """The first two answers are awaiting_batch, the third new_run; results land in call order."""
    runtime = await make_runtime([editor_agent()])
    handle = await runtime.start("editor", "3 edits")
    pending = await runtime.wait_for_pending(handle.session_id, 3)
    ids = [p["toolCallId"] for p in pending]
    kinds = []
    for i in (2, 0, 1):  # out of order on purpose
        answer = await runtime.submit_tool_result(handle.session_id, ids[i], result={"applied": i})
        assert answer.continuation is not None
        kinds.append(answer.continuation.kind)
    assert kinds == ["awaiting_batch", "awaiting_batch", "new_run"]
    await runtime.wait(handle.session_id)
    history = await runtime.messages(handle.session_id)
    assert [m.tool_call_id for m in history if m.role == "tool"] == ids
    assert [m.result["applied"] for m in history if m.role == "tool"] == [0, 1, 2]
    assert history[-1].content.startswith("results: ")


async def test_deadline_lapse_is_a_timeout_result(make_runtime: MakeRuntime) -> None:
    """A lapsed deadline gives the model client_tool_timeout; a later result is refused.

    The deadline is 2 s, not less: the test must see the call pending before it lapses.
    """
    llm = ScriptedLLM(batch_script)
    runtime = await make_runtime([editor_agent(timeout=2.0, llm=llm)])
    handle = await runtime.start("editor", "1 edit")
    pending = await runtime.wait_for_pending(handle.session_id)
    view = await runtime.wait(handle.session_id, timeout=20)
    assert view["status"] == "completed"
    tool = [m for m in llm.requests[-1].messages if m.role == "tool"][0]
    assert tool.is_error and tool.error_code == "client_tool_timeout"
    assert "did not answer before the deadline" in tool.content
    late = await runtime.submit_tool_result(
        handle.session_id, pending[0]["toolCallId"], result={"applied": 1}
    )
    assert late.status == "unknown_tool_call" and late.reason == "deadline_lapsed"
    assert await _tool_rows(runtime, handle.session_id) == [pending[0]["toolCallId"]]


async def test_fifty_concurrent_identical_submits(make_runtime: MakeRuntime) -> None:
    """Exactly one accepted, 49 already_completed, one tool-result row."""
    runtime = await make_runtime([editor_agent()])
    handle = await runtime.start("editor", "1 edit")
    (call,) = await runtime.wait_for_pending(handle.session_id)
    answers = await asyncio.gather(
        *[
            runtime.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 7})
            for _ in range(50)
        ]
    )
    statuses = [a.status for a in answers]
    assert statuses.count("accepted") == 1
    assert statuses.count("already_completed") == 49
    await runtime.wait(handle.session_id)
    assert await _tool_rows(runtime, handle.session_id) == [call["toolCallId"]]
    history = await runtime.messages(handle.session_id)
    assert [m.result for m in history if m.role == "tool"] == [{"applied": 7, "failed": 0}] or [
        m.result for m in history if m.role == "tool"
    ] == [{"applied": 7}]


async def test_invalid_and_oversized_results_are_refused(make_runtime: MakeRuntime) -> None:
    """Both refusals are typed, store nothing, and the call can still be answered."""
    runtime = await make_runtime([editor_agent()], max_result_bytes=200)
    handle = await runtime.start("editor", "1 edit")
    (call,) = await runtime.wait_for_pending(handle.session_id)
    tcid = call["toolCallId"]
    with pytest.raises(InvalidResultError) as invalid:
        await runtime.submit_tool_result(handle.session_id, tcid, result={"applied": -1})
    assert invalid.value.code == "INVALID_RESULT"
    assert invalid.value.to_body()["toolName"] == "edit"
    big = {"applied": 1, "pad": "x" * 500}
    with pytest.raises(PayloadTooLargeError) as too_large:
        await runtime.submit_tool_result(handle.session_id, tcid, result=big)
    body = too_large.value.to_body()
    assert body["cause"] == "tool_result" and body["limitBytes"] == 200
    assert body["sizeBytes"] == len(json.dumps(big, separators=(",", ":")).encode())
    state = await runtime.session(handle.session_id)
    assert state.pending[tcid].submitted_at is None
    answer = await runtime.submit_tool_result(handle.session_id, tcid, result={"applied": 2})
    assert answer.status == "accepted"
    assert (await runtime.wait(handle.session_id))["status"] == "completed"


async def test_error_submission_skips_validation(make_runtime: MakeRuntime) -> None:
    """An error submit is accepted whatever the schema; the model reads the error verbatim."""
    llm = ScriptedLLM(batch_script)
    runtime = await make_runtime([editor_agent(llm=llm)])
    handle = await runtime.start("editor", "1 edit")
    (call,) = await runtime.wait_for_pending(handle.session_id)
    answer = await runtime.submit_tool_result(
        handle.session_id, call["toolCallId"], error="user_cancelled"
    )
    assert answer.status == "accepted"
    await runtime.wait(handle.session_id)
    tool = [m for m in llm.requests[-1].messages if m.role == "tool"][0]
    assert tool.is_error and tool.content == "user_cancelled"


async def test_unknown_tool_call(make_runtime: MakeRuntime) -> None:
    """A never-issued id, or an unknown session, answers unknown_tool_call and stores nothing."""
    runtime = await make_runtime([editor_agent()])
    handle = await runtime.start("editor", "1 edit")
    await runtime.wait_for_pending(handle.session_id)
    answer = await runtime.submit_tool_result(
        handle.session_id, "never-issued", result={"applied": 1}
    )
    assert answer.status == "unknown_tool_call"
    answer = await runtime.submit_tool_result("no-such-session", "x", result={"applied": 1})
    assert answer.status == "unknown_tool_call"


async def test_an_unexpected_model_error_fails_the_turn_typed(make_runtime: MakeRuntime) -> None:
    """A model adapter raising a plain exception ends the turn failed, never stuck running."""

    def broken(request):  # type: ignore[no-untyped-def]
        raise KeyError("adapter bug")

    runtime = await make_runtime([editor_agent(llm=ScriptedLLM(broken))])
    handle = await runtime.start("editor", "hello")
    view = await runtime.wait(handle.session_id)
    assert view["status"] == "failed"
    assert view["error"]["code"] == "framework_internal_error"
    again = await runtime.start("editor", "hello again", session_id=handle.session_id)
    assert (await runtime.wait(again.session_id))["status"] == "failed"
