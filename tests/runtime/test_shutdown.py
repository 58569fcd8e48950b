"""A shutdown leaves no workflow of its runtime running in the event loop, and a parked turn
it let go stays PENDING: the next process of the executor recovers it, and it completes.

Before, a parked turn's task outlived the shutdown. When its event loop ended, the garbage
collector closed the coroutine mid-await, and the turn's error handling ran then: in a
process that had launched another runtime since, it took that runtime's commit connections
and never gave them back (its next commits waited for ever).
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from helix_dbos.config import HelixSettings
from helix_dbos.runtime import AgentRuntime
from tests.runtime.agents import editor_agent

RELEASED = "runtime.workflows_released"


def _runtime(db_url: str) -> AgentRuntime:
    settings = HelixSettings(database_url=db_url, executor_id="exec", application_version="t")
    return AgentRuntime([editor_agent()], settings)


def test_shutdown_lets_parked_turns_go_and_the_next_process_finishes_them(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Each runtime in an event loop of its own, as in a process of its own.
    with caplog.at_level(logging.INFO):
        session_id, call_id = asyncio.run(_park_then_shut_down(db_url))
    released = [r for r in caplog.records if getattr(r, "event", None) == RELEASED]
    assert [r.__dict__["fields"] for r in released] == [{"count": 1, "unfinished": 0}]
    assert not [r for r in caplog.records if "task cancelled" in r.getMessage()]
    asyncio.run(_recover_and_answer(db_url, session_id, call_id))


async def _park_then_shut_down(db_url: str) -> tuple[str, str]:
    first = _runtime(db_url)
    await first.launch()
    handle = await first.start("editor", "1 edit")
    [call] = await first.wait_for_pending(handle.session_id)
    task = handle.workflow.task
    assert not task.done()
    await first.shutdown()
    assert task.done(), "the parked turn's task outlived the shutdown"
    # Cancelled, not ended: DBOS recorded nothing, so the turn is still PENDING.
    assert task.cancelled()
    return handle.session_id, call["toolCallId"]


async def _recover_and_answer(db_url: str, session_id: str, call_id: str) -> None:
    second = _runtime(db_url)
    await second.launch()
    try:
        assert (await second.status(session_id))["status"] == "suspended_client_tool"
        await second.submit_tool_result(session_id, call_id, result={"applied": 1})
        assert (await second.wait(session_id, timeout=60))["status"] == "completed"
        ends = [e for e in await second.events(session_id, 0) if e.type == "tool_end"]
        assert len(ends) == 1
    finally:
        await second.shutdown()
