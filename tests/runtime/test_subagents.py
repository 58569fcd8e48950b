"""Sub-agents: child turns with their own sessions, client calls routed through the ROOT's
ownership map, a stop that cascades down the tree, and ownership writes that never fail
silently.

The tree in every test: ``root`` calls ``subagent__child``, ``child`` calls
``subagent__grandchild``, and ``grandchild`` asks the client (``locate``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from dbos import DBOS

from helix_dbos.core.messages import Message
from helix_dbos.core.session import SessionState
from helix_dbos.errors import StaleStateError
from helix_dbos.runtime import AgentRuntime
from helix_dbos.testing import capture_log_events
from tests.support.agent_tree import tree
from tests.support.in_flight import InFlight


async def sessions_of(
    rt: AgentRuntime, root_id: str
) -> tuple[SessionState, SessionState, SessionState]:
    """The root, its child and its grandchild sessions."""
    below = await rt.store.descendants(root_id)
    assert len(below) == 2, below
    child = next(s for s in below if s.parent_session_id == root_id)
    grandchild = next(s for s in below if s.parent_session_id == child.session_id)
    return await rt.session(root_id), child, grandchild


async def parked_tree(rt: AgentRuntime) -> tuple[str, dict[str, Any]]:
    """Start the tree and wait until the grandchild's coroutine is inside ``recv``."""
    handle = await rt.start("root", "go")
    [pending] = await rt.wait_for_pending(handle.session_id)
    for _ in range(500):
        if rt.ctx.parked:
            break
        await asyncio.sleep(0.01)
    return handle.session_id, pending


#: How long a stopped turn may take to leave its ``recv``: far from both what it needs (the
#: stop's wake-up, milliseconds) and the 300 s deadline that would free it without one, so a
#: busy machine never fails the test and a lost wake-up always does.
STOP_BOUND = 60.0


async def gone_within(rt: AgentRuntime, seconds: float) -> None:
    """Wait until no coroutine is parked in ``recv``; fail if one still is after ``seconds``."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while rt.ctx.parked and loop.time() - started < seconds:
        await asyncio.sleep(0.01)
    assert rt.ctx.parked == set(), f"still parked after {seconds} s: {rt.ctx.parked}"


async def workflow_status(workflow_id: str | None) -> str:
    """The workflow's DBOS status once it has ended (a session ends just before its
    workflow records its output)."""
    assert workflow_id is not None
    for _ in range(250):
        status = await DBOS.get_workflow_status_async(workflow_id)
        assert status is not None
        if status.status not in ("PENDING", "ENQUEUED"):
            break
        await asyncio.sleep(0.02)
    assert status is not None
    return str(status.status)


def assert_paired(history: list[Message]) -> None:
    results = [m.tool_call_id for m in history if m.role == "tool"]
    calls = [c.id for m in history if m.role == "assistant" for c in m.tool_calls]
    assert sorted(results, key=str) == sorted(calls) and len(results) == len(set(results)), history


async def test_grandchild_call_is_owned_below_registered_on_root_and_submitted_on_root(
    make_runtime: Any,
) -> None:
    root_agent, llms = tree()
    rt = await make_runtime([root_agent])
    root_id, pending = await parked_tree(rt)
    root, child, grandchild = await sessions_of(rt, root_id)
    tcid = pending["toolCallId"]

    # Owned by the grandchild session, registered in the ROOT's ownership map.
    assert child.parent_session_id == root_id and child.root_session_id == root_id
    assert grandchild.parent_session_id == child.session_id
    assert grandchild.root_session_id == root_id
    assert list(grandchild.pending) == [tcid] and grandchild.status == "suspended_client_tool"
    assert root.ownership == {tcid: grandchild.session_id}
    assert child.ownership == {} and grandchild.ownership == {}
    assert root.pending == {} and child.pending == {}
    assert root.status == "running" and child.status == "running"

    # The root's status lists the grandchild's call: the client submits there.
    view = await rt.status(root_id)
    assert view["status"] == "suspended_client_tool"
    assert [(p["toolCallId"], p["ownerSessionId"]) for p in view["pendingToolCalls"]] == [
        (tcid, grandchild.session_id)
    ]

    # Submitting on a sub-agent's own session id is not the contract: nothing is stored there.
    wrong = await rt.submit_tool_result(grandchild.session_id, tcid, result={"where": "sofa"})
    assert wrong.status == "unknown_tool_call"
    assert (await rt.session(grandchild.session_id)).pending[tcid].submitted_at is None

    answer = await rt.submit_tool_result(root_id, tcid, result={"where": "under the sofa"})
    assert answer.status == "accepted"
    assert answer.continuation is not None and answer.continuation.kind == "new_run"

    final = await rt.wait(root_id)
    assert final["status"] == "completed"
    root, child, grandchild = await sessions_of(rt, root_id)
    assert [s.status for s in (root, child, grandchild)] == ["completed"] * 3
    assert root.ownership == {} and grandchild.pending == {}
    assert root.completed[tcid].owner_session_id == grandchild.session_id

    assert (await rt.messages(grandchild.session_id))[-1].content == (
        'grandchild: {"where": "under the sofa"}'
    )
    assert (await rt.messages(child.session_id))[-1].content == (
        'child: grandchild: {"where": "under the sofa"}'
    )
    history = await rt.messages(root_id)
    assert history[-1].content == 'root: child: grandchild: {"where": "under the sofa"}'
    for state in (root, child, grandchild):
        assert_paired(await rt.messages(state.session_id))
    assert {name: llm.calls for name, llm in llms.items()} == {
        "root": 2,
        "child": 2,
        "grandchild": 2,
    }
    # A re-send is answered from the root's tombstone.
    again = await rt.submit_tool_result(root_id, tcid, result={"where": "sofa"})
    assert again.status == "already_completed"


async def test_interrupting_the_root_stops_the_whole_tree(
    make_runtime: Any, monkeypatch: Any
) -> None:
    root_agent, llms = tree()
    rt = await make_runtime([root_agent])
    in_flight = InFlight(rt, monkeypatch)
    root_id, pending = await parked_tree(rt)
    root, child, grandchild = await sessions_of(rt, root_id)
    assert rt.ctx.parked == {grandchild.workflow_id}

    await rt.interrupt(root_id)
    await gone_within(rt, STOP_BOUND)  # the deadline is 300 s: only the stop's wake frees it

    for state in (root, child, grandchild):
        assert await workflow_status(state.workflow_id) == "CANCELLED", state.session_id
    root, child, grandchild = await sessions_of(rt, root_id)
    assert [s.status for s in (root, child, grandchild)] == ["interrupted"] * 3
    assert root.ownership == {} and grandchild.pending == {} and child.pending == {}
    assert root.completed[pending["toolCallId"]].outcome == "stopped"
    view = await rt.status(root_id)
    assert view["status"] == "interrupted" and view["pendingToolCalls"] == []

    late = await rt.submit_tool_result(root_id, pending["toolCallId"], result={"where": "sofa"})
    assert late.status == "unknown_tool_call" and late.reason == "run_stopped"
    assert (await rt.session(grandchild.session_id)).pending == {}

    # The stopped workflows stay stopped: once their bodies have returned (and nothing they
    # started runs), no model call ran after the interrupt.
    await in_flight.settled()
    assert {name: llm.calls for name, llm in llms.items()} == {
        "root": 1,
        "child": 1,
        "grandchild": 1,
    }

    # The next message on the root starts a clean turn whose history pairs every call.
    await rt.start("root", "again", session_id=root_id)
    assert (await rt.wait(root_id))["status"] == "completed"
    history = await rt.messages(root_id)
    assert_paired(history)
    healed = next(m for m in history if m.role == "tool")
    assert healed.error_code == "not_executed" and healed.tool_name == "subagent__child"
    assert llms["root"].requests[-1].messages[-2].error_code == "not_executed"


async def test_interrupting_a_sub_agent_stops_its_subtree_and_the_parent_goes_on(
    make_runtime: Any,
) -> None:
    """A stop aimed at the child stops the child and the grandchild; the root reads the
    child's call as a failed (``aborted``) tool result and completes its turn."""
    root_agent, llms = tree()
    rt = await make_runtime([root_agent])
    root_id, pending = await parked_tree(rt)
    root, child, grandchild = await sessions_of(rt, root_id)

    await rt.interrupt(child.session_id)
    await gone_within(rt, STOP_BOUND)
    assert (await rt.wait(root_id))["status"] == "completed"

    root, child, grandchild = await sessions_of(rt, root_id)
    assert (root.status, child.status, grandchild.status) == (
        "completed",
        "interrupted",
        "interrupted",
    )
    assert await workflow_status(child.workflow_id) == "CANCELLED"
    assert await workflow_status(grandchild.workflow_id) == "CANCELLED"
    assert await workflow_status(root.workflow_id) == "SUCCESS"
    assert root.ownership == {} and grandchild.pending == {}
    assert root.completed[pending["toolCallId"]].outcome == "stopped"

    history = await rt.messages(root_id)
    assert_paired(history)
    result = next(m for m in history if m.role == "tool")
    assert result.tool_name == "subagent__child"
    assert result.is_error and result.error_code == "aborted"
    assert history[-1].content == "root: error aborted"
    assert llms["child"].calls == 1 and llms["grandchild"].calls == 1

    late = await rt.submit_tool_result(root_id, pending["toolCallId"], result={"where": "sofa"})
    assert late.status == "unknown_tool_call" and late.reason == "run_stopped"


async def test_ownership_write_failure_is_raised_never_swallowed(
    make_runtime: Any, monkeypatch: Any
) -> None:
    """The grandchild's registration writes its pending entry and the root's ownership entry
    together; when the root's compare-and-swap keeps losing, the grandchild's turn fails
    typed ``state_conflict`` (logged ``client_tool.ownership_write_failed``) and nothing is
    left half-registered."""
    root_agent, llms = tree()
    rt = await make_runtime([root_agent])
    real_save = rt.store._save
    attempts: list[str] = []

    async def losing_save(state: SessionState, conn: Any) -> SessionState:
        if state.is_root and state.ownership:
            attempts.append(state.session_id)
            raise StaleStateError("another writer won", sessionId=state.session_id)
        saved: SessionState = await real_save(state, conn)
        return saved

    monkeypatch.setattr(rt.store, "_save", losing_save)
    with capture_log_events() as logged:
        handle = await rt.start("root", "go")
        assert (await rt.wait(handle.session_id))["status"] == "completed"

    root, child, grandchild = await sessions_of(rt, handle.session_id)
    assert len(attempts) == 3, "every compare-and-swap attempt was tried"
    assert grandchild.status == "failed"
    assert grandchild.error is not None and grandchild.error["code"] == "state_conflict"
    assert grandchild.pending == {} and root.ownership == {}
    # The failed registration rolled back with its step: no tool call without its result.
    assert [m.role for m in await rt.messages(grandchild.session_id)] == ["user"]
    failures = [e for e in logged if e["event"] == "client_tool.ownership_write_failed"]
    assert len(failures) == 1 and failures[0]["level"] == "ERROR"
    assert failures[0]["sessionIds"] == [grandchild.session_id, handle.session_id]
    # The failure travels up as the sub-agent's tool result, never as a silent success.
    assert llms["child"].requests[-1].messages[-1].error_code == "state_conflict"
    assert child.status == "completed" and root.status == "completed"
    assert llms["grandchild"].calls == 1
