"""A persistent session's turn parked on a client call hibernates like a standard turn: its
persistent workflow ends, and the continuation finishes the turn and then serves the
session's inbox (the next message goes to it). Postgres and SQLite."""

from __future__ import annotations

import asyncio
from typing import Any

from dbos import DBOS

from helix_dbos.runtime import names
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import hibernated
from tests.runtime.persistent_agents import keeper_agent


async def test_a_persistent_turn_hibernates_and_its_continuation_serves_the_inbox(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime([keeper_agent(idle_ttl=30)], hibernate_after_seconds=0)
    first = await runtime.start("keeper", "1 edit")
    sid = first.session_id
    mark = await hibernated(runtime, sid)
    assert mark is not None
    assert first.workflow_id is not None
    persistent: Any = await DBOS.retrieve_workflow_async(first.workflow_id)
    assert (await asyncio.wait_for(persistent.get_result(), 30))["ended"] == "hibernated"
    (call,) = (await runtime.store.get(sid)).pending.values()
    await runtime.submit_tool_result(sid, call.tool_call_id, result={"applied": 1})
    outcome = await asyncio.wait_for(first.result(), 30)
    assert outcome["outcome"] == "completed" and "applied" in outcome["text"]
    continuation = names.continuation_workflow_id(sid, call.run_id)
    state = await runtime.store.get(sid)
    assert state.workflow_id == continuation
    assert state.metadata["persistent"]["workflowId"] == continuation
    # The next message is delivered to the continuation's inbox: no new workflow starts.
    second = await runtime.start("keeper", "hello", session_id=sid)
    assert (second.delivery, second.workflow_id) == ("delivered", continuation)
    assert (await asyncio.wait_for(second.result(), 30))["text"] == "echo: hello"


async def test_an_interrupted_hibernated_persistent_turn_takes_its_next_message_anew(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(
        [keeper_agent(idle_ttl=30)], hibernate_after_seconds=0, deadline_keeper_seconds=0
    )
    first = await runtime.start("keeper", "1 edit")
    sid = first.session_id
    assert await hibernated(runtime, sid) is not None
    await runtime.interrupt(sid)
    state = await runtime.store.get(sid)
    assert state.status == "interrupted"
    assert "hibernated" not in state.metadata and "persistent" not in state.metadata
    assert (await asyncio.wait_for(first.result(), 30))["outcome"] == "stopped"
    second = await runtime.start("keeper", "hello", session_id=sid)
    assert second.delivery == "started"
    assert (await asyncio.wait_for(second.result(), 30))["text"] == "echo: hello"
