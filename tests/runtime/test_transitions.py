"""Transitions that must hold under retries and reordering: pure mutations, a forward-only
checkpoint pointer, a wake-up that arrives before its answer is visible."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dbos import DBOS

from helix_dbos.core.session import SessionState
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import names
from helix_dbos.runtime._turn import steps
from helix_dbos.store.store import RetryTransaction, now_ms
from helix_dbos.testing import capture_log_events
from tests.observability.obs_helpers import FlakySaves
from tests.runtime.conftest import MakeRuntime
from tests.support.asker import asker, parked, script


async def test_a_retried_stop_counts_each_call_once(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop's first compare-and-swap loses; its mutation runs again on fresh rows. It
    reports what it stopped through its return value, so each call is aborted (logged and
    counted) once."""
    rt = await make_runtime([asker(ScriptedLLM(script))])
    sid, calls = await parked(rt, "ask twice", count=2)
    flaky = FlakySaves(monkeypatch)
    flaky.arm(1)
    with capture_log_events() as logged:
        state = await rt.interrupt(sid)
    assert flaky.raised == 1 and state.status == "interrupted"
    aborted = sorted(e["toolCallId"] for e in logged if e["event"] == "client_tool.aborted")
    assert aborted == sorted(c["toolCallId"] for c in calls)
    [summary] = [e for e in logged if e["event"] == "turn.summary"]
    assert summary["stoppedCalls"] == 2


async def test_the_checkpoint_pointer_only_moves_forward(make_runtime: MakeRuntime) -> None:
    """A writer holding an older checkpoint (a slow re-execution) does not move the session's
    pointer back from a newer one."""
    rt = await make_runtime([asker(ScriptedLLM(script))])
    store = rt.store
    await store.create_session(
        SessionState(session_id="s", agent_type="asker", root_session_id="s")
    )
    now = datetime.now(UTC)
    await store.write_checkpoint(
        "s", "r", step_count=2, state={}, checkpoint_id="new", created_at=now
    )
    await store.write_checkpoint(
        "s", "r", step_count=1, state={}, checkpoint_id="old", created_at=now - timedelta(seconds=5)
    )
    assert (await store.get("s")).latest_checkpoint_id == "new"
    await store.write_checkpoint(
        "s",
        "r",
        step_count=3,
        state={},
        checkpoint_id="newer",
        created_at=now + timedelta(seconds=1),
    )
    assert (await store.get("s")).latest_checkpoint_id == "newer"


async def test_a_wake_up_before_its_answer_is_visible_waits_for_the_answer(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wake-up lands first; the answer commits only once the woken turn has read the
    row and found no answer. The turn uses the answer (it waits until the answer is
    visible), never resolving the call as a timeout."""
    rt = await make_runtime([asker(ScriptedLLM(script))])
    sid, [pending] = await parked(rt)
    tcid = pending["toolCallId"]
    missed = threading.Event()
    real_await_visible = steps.await_visible

    def await_visible(owner: SessionState, woken: Any, at: int) -> None:
        try:
            real_await_visible(owner, woken, at)
        except RetryTransaction:
            missed.set()  # woken for an answer the row does not show yet: it waits
            raise

    monkeypatch.setattr(steps, "await_visible", await_visible)
    state = await rt.session(sid)
    at = now_ms()
    await DBOS.send_async(
        state.workflow_id or "",
        {"kind": "answer", "toolCallId": tcid, "submittedAt": at},
        names.tool_result_topic(tcid),
    )
    assert await asyncio.to_thread(missed.wait, 30), "the woken turn never looked for it"

    def answer(states: dict[str, SessionState]) -> None:
        entry = states[sid].pending[tcid]
        entry.submitted_at = at
        entry.response = {"result": {"text": "blue"}}

    await rt.store.update([sid], answer)
    assert (await rt.wait(sid))["status"] == "completed"
    [tool] = [m for m in await rt.messages(sid) if m.role == "tool"]
    assert tool.result == {"text": "blue"} and not tool.is_error


async def test_an_error_string_and_a_denial_reason_count_against_the_size_limit(
    make_runtime: MakeRuntime,
) -> None:
    from helix_dbos.errors import PayloadTooLargeError

    rt = await make_runtime([asker(ScriptedLLM(script))], max_result_bytes=64)
    sid, [pending] = await parked(rt)
    with pytest.raises(PayloadTooLargeError):
        await rt.submit_tool_result(sid, pending["toolCallId"], error="é" * 40)
    ok = await rt.submit_tool_result(sid, pending["toolCallId"], error="é" * 20)
    assert ok.status == "accepted"
