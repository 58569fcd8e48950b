"""Exactly-once commits: a step's writes and its checkpoint commit together, once."""

from __future__ import annotations

import asyncio

from helix_dbos.core.messages import Message
from helix_dbos.core.session import SessionState
from helix_dbos.runtime.once import commit_once, step_connection
from tests.runtime.agents import editor_agent
from tests.runtime.conftest import MakeRuntime


async def test_a_re_executed_step_writes_nothing_and_returns_the_first_result(
    make_runtime: MakeRuntime,
) -> None:
    """The second execution of a slot (a crash before DBOS recorded the step, or a concurrent
    duplicate) returns the first execution's result, and its writes are rolled back."""
    runtime = await make_runtime([editor_agent()])
    store = runtime.store
    await store.create_session(
        SessionState(session_id="s", agent_type="editor", root_session_id="s")
    )
    calls = 0

    async def body() -> dict[str, int]:
        nonlocal calls
        calls += 1
        n = calls
        await store.append_messages(
            "s", "r", [Message(role="user", content=f"write {n}")], await step_connection()
        )
        return {"execution": n}

    first = await commit_once("wf:1:test", "s", "r", 0, body)
    again = await commit_once("wf:1:test", "s", "r", 0, body)
    racing = await asyncio.gather(*[commit_once("wf:2:test", "s", "r", 0, body) for _ in range(5)])
    assert first == again == {"execution": 1}
    assert len({r["execution"] for r in racing}) == 1
    contents = [m.content for m in await store.load_messages("s")]
    assert contents.count("write 1") == 1 and len(contents) == 2
    state = await store.get("s")
    assert state.latest_checkpoint_id == "wf:2:test"
