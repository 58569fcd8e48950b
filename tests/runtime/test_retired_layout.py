"""A turn recorded by contract-1 (layout 1, whose commits were DBOS steps) is no longer
replayed: it ends failed, typed ``framework_turn_lost`` and retryable, writing nothing else,
and ``retry`` runs it again from its conversation. Postgres and SQLite."""

from __future__ import annotations

import asyncio

import pytest

from helix_dbos.runtime import names
from helix_dbos.runtime._turn.workflow import RETIRED_MESSAGE
from tests.runtime.agents import editor_agent
from tests.runtime.conftest import MakeRuntime


async def test_a_layout_1_turn_ends_failed_retryable_and_retry_runs_it_again(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = await make_runtime([editor_agent()])
    with monkeypatch.context() as patch:
        patch.setattr(names, "TURN_LAYOUT", 1)  # as a contract-1 release started its turns
        handle = await runtime.start("editor", "1 edit")
    outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome["outcome"] == "failed"
    assert outcome["error"]["code"] == "framework_turn_lost"
    assert outcome["error"]["retryable"] is True
    assert outcome["error"]["message"] == RETIRED_MESSAGE
    state = await runtime.store.get(handle.session_id)
    assert state.status == "failed" and not state.pending
    # Nothing of the model step was run or written: only the user's message is there.
    assert [m.role for m in await runtime.messages(handle.session_id)] == ["user"]
    retried = await runtime.retry(handle.session_id)
    (call,) = await runtime.wait_for_pending(handle.session_id)
    await runtime.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
    assert (await asyncio.wait_for(retried.result(), 30))["outcome"] == "completed"
