"""A sub-agent's turn hibernates, and its parent with it (``_turn/hibernation.py``, "A sub-agent's
turn hibernates like a root's"). On Postgres and SQLite.

Invariants (ARCHITECTURE.md, rule 25): a parent waiting on a hibernated sub-agent holds no
workflow and is continued once, when the sub-agent's turn ends (its continuation or a stop
reports the end on the parent's row); an end that lands before the parent hibernates is
taken live. The sub-agent's call is submitted on the root and routed by the ownership map.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from dbos import DBOS

from helix_dbos.core import define_agent
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime, names
from helix_dbos.runtime._hibernated import continuation, keeper
from helix_dbos.runtime._turn import hibernation
from helix_dbos.runtime.records import NEVER_DUE
from tests.runbook_sql import runbook_sql
from tests.runtime.conftest import MakeRuntime
from tests.runtime.hibernation_worker import (
    agent,
    assert_paired,
    completed,
    continuations,
    delegate_script,
    hibernated,
    wait_until,
    workflow_result,
)


async def _delegating(make_runtime: MakeRuntime, **settings: Any) -> AgentRuntime:
    """A runtime with ``parent``, whose model asks its sub-agent ``cold`` for one edit;
    every turn hibernates at once (hot window 0)."""
    cold = agent("cold")
    parent = define_agent("parent", llm=ScriptedLLM(delegate_script), subagents=[cold])
    return await make_runtime([parent, cold], hibernate_after_seconds=0, **settings)


async def _hibernated_tree(runtime: AgentRuntime) -> tuple[Any, str, str]:
    """Start ``parent`` and wait until it and its sub-agent have hibernated: the handle, the
    sub-agent's session and the sub-agent's pending call."""
    handle = await runtime.start("parent", "go")
    [pending] = await runtime.wait_for_pending(handle.session_id)
    child = str(pending["ownerSessionId"])
    assert child != handle.session_id
    await hibernated(runtime, child)
    mark = await hibernated(runtime, handle.session_id)
    assert mark["dueAt"] == NEVER_DUE
    return handle, child, str(pending["toolCallId"])


async def _active_workflows(*session_ids: str) -> list[str]:
    """The workflows of these sessions DBOS still holds PENDING (parked or running)."""
    found = await DBOS.list_workflows_async(status="PENDING", load_input=False, load_output=False)
    return [
        w.workflow_id for w in found if any(f"helix:{sid}:" in w.workflow_id for sid in session_ids)
    ]


async def _none_active(*session_ids: str) -> bool:
    return await _active_workflows(*session_ids) == []


async def test_a_hibernated_sub_agent_hibernates_its_parent_and_a_root_submit_continues_both(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await _delegating(make_runtime)
    handle, child, call = await _hibernated_tree(runtime)
    # Their workflows end just after their hibernate commits.
    assert await wait_until(lambda: _none_active(handle.session_id, child))
    parent_mark = (await runtime.store.get(handle.session_id)).metadata["hibernated"]
    assert (await workflow_result(handle.workflow_id)) | {} == {
        "outcome": "hibernated",
        "text": "",
        "output": None,
        "error": None,
        "runId": handle.run_id,
        "continueAs": names.continuation_workflow_id(
            handle.session_id, handle.run_id, parent_mark["child"]
        ),
    }
    # An answer for the parent's call does not make the parent due: it waits on its sub-agent.
    answer = await runtime.submit_tool_result(handle.session_id, call, result={"applied": 1})
    assert answer.status == "accepted" and answer.continuation is not None
    assert answer.continuation.kind == "new_run"
    outcome = await completed(runtime, handle)
    assert outcome["text"].startswith("done: ")
    assert "applied" in outcome["text"]  # the sub-agent's reply, with its edit's result
    for sid in (handle.session_id, child):
        state = await runtime.store.get(sid)
        assert state.status == "completed"
        assert "hibernated" not in state.metadata and "childEnds" not in state.metadata
        assert_paired(await runtime.messages(sid))
        assert len(await continuations(sid)) == 1
    # The parent's tool result is the sub-agent's reply, once.
    results = [m for m in await runtime.messages(handle.session_id) if m.role == "tool"]
    assert len(results) == 1 and not results[0].is_error


async def test_a_sub_agent_stopped_alone_while_hibernated_ends_as_stopped_for_its_parent(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await _delegating(make_runtime)
    handle, child, call = await _hibernated_tree(runtime)
    stopped = await runtime.interrupt(child)
    assert stopped.status == "interrupted"
    outcome = await completed(runtime, handle)
    assert outcome["text"] == "done: The sub-agent was stopped before it finished."
    assert (await runtime.store.get(child)).status == "interrupted"
    assert len(await continuations(child)) == 0
    assert len(await continuations(handle.session_id)) == 1


async def test_interrupt_of_the_root_stops_a_hibernated_tree(make_runtime: MakeRuntime) -> None:
    runtime = await _delegating(make_runtime)
    handle, child, call = await _hibernated_tree(runtime)
    await runtime.interrupt(handle.session_id)
    for sid in (handle.session_id, child):
        state = await runtime.store.get(sid)
        assert state.status == "interrupted" and "hibernated" not in state.metadata
    late = await runtime.submit_tool_result(handle.session_id, call, result={"applied": 1})
    assert late.reason == "run_stopped"  # as for a hot sub-agent's call
    assert (await handle.result())["outcome"] == "stopped"
    assert await continuations(handle.session_id) == []
    assert await continuations(child) == []


async def test_a_sub_agent_that_ends_before_its_parent_hibernates_is_taken_live(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the parent's row decides: the sub-agent's continuation reports its end (on
    the parent's row) after the sub-agent hibernated but before the parent's hibernate
    commit. That commit sees the end and the parent goes on live: no mark, no continuation,
    one result. Held here by answering the sub-agent's call, and waiting for its end on the
    parent's row, just before the parent's commit runs."""
    runtime = await _delegating(make_runtime)
    real = hibernation.hibernate

    async def answer_first(*args: Any, **kwargs: Any) -> Any:
        child = kwargs.get("child")
        if child is not None:
            state = await runtime.store.get(args[0])
            child_session = names.child_session_id(state.session_id, child)
            pending = await wait_until(lambda: _pending_of(runtime, child_session))
            await runtime.submit_tool_result(state.session_id, pending, result={"applied": 1})
            ended = await wait_until(lambda: _reported(runtime, state.session_id, child))
            assert ended
        return await real(*args, **kwargs)

    monkeypatch.setattr(hibernation, "hibernate", answer_first)
    handle = await runtime.start("parent", "go")
    outcome = await completed(runtime, handle)
    assert "applied" in outcome["text"]
    assert (await workflow_result(handle.workflow_id))["outcome"] == "completed"
    assert await continuations(handle.session_id) == []
    state = await runtime.store.get(handle.session_id)
    assert "hibernated" not in state.metadata and "childEnds" not in state.metadata
    assert len([m for m in await runtime.messages(handle.session_id) if m.role == "tool"]) == 1


async def test_a_parent_whose_continuation_did_not_start_after_its_sub_agents_end_is_kept(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sub-agent's end is reported on its parent's row (the parent is due now), but the
    parent's continuation does not start there (its start failed, or this process does not
    run the parent's agent). The deadline keeper claims the due row, which moves its due time
    to the end of the lease, and must still start the continuation: a claimed mark is no
    longer waiting on its sub-agent. Before this was so, the keeper read the claimed mark as
    still waiting, started nothing, and claimed it again at every lease, for ever."""
    runtime = await _delegating(make_runtime, deadline_keeper_seconds=0)
    handle, child, call = await _hibernated_tree(runtime)
    real = continuation.start_continuation

    async def not_the_parents(ctx: Any, state: Any) -> Any:
        if state.session_id == handle.session_id:
            return None  # as a start that failed: the mark stays, due
        return await real(ctx, state)

    monkeypatch.setattr(continuation, "start_continuation", not_the_parents)
    await runtime.submit_tool_result(handle.session_id, call, result={"applied": 1})
    reported = await wait_until(lambda: _reported_calls(runtime, handle.session_id))
    mark = (await runtime.store.get(handle.session_id)).metadata["hibernated"]
    assert reported == [mark["child"]] and mark["dueAt"] == 0
    assert await continuations(handle.session_id) == []
    monkeypatch.setattr(continuation, "start_continuation", real)
    assert await keeper.keep_once(runtime.ctx) == 1
    outcome = await completed(runtime, handle)
    assert "applied" in outcome["text"]
    assert len(await continuations(handle.session_id)) == 1
    assert await keeper.keep_once(runtime.ctx) == 0


async def _reported_calls(runtime: AgentRuntime, parent_session_id: str) -> list[str]:
    """The calls whose sub-agents reported their end on the parent's row."""
    state = await runtime.store.load(parent_session_id)
    return [] if state is None else list(state.metadata.get("childEnds", {}))


async def _pending_of(runtime: AgentRuntime, session_id: str) -> str | None:
    state = await runtime.store.load(session_id)
    if state is None or not state.pending or "hibernated" not in state.metadata:
        return None
    return next(iter(state.pending))


async def _reported(runtime: AgentRuntime, parent_session_id: str, call: str) -> bool:
    """Whether the sub-agent of ``call`` reported its end on its parent's row."""
    state = await runtime.store.load(parent_session_id)
    return state is not None and call in state.metadata.get("childEnds", {})


async def test_the_runbook_lists_a_parent_waiting_on_its_sub_agent(
    make_runtime: MakeRuntime, db_url: str
) -> None:
    """docs/runbook.md's ``hibernated-sessions`` statement, verbatim, on a hibernated tree: the
    parent's row names the call it waits on and its continuation, and shows no due time (its
    ``dueAt`` is ``NEVER_DUE``, past what a timestamp holds)."""
    if not db_url.startswith("postgresql"):
        pytest.skip("the runbook's statement is Postgres SQL")
    runtime = await _delegating(make_runtime)
    handle, child, _ = await _hibernated_tree(runtime)
    _, sql = runbook_sql()["hibernated-sessions"]
    with psycopg.connect(db_url) as conn:
        rows = {r[0]: r for r in conn.execute(sql).fetchall()}
    assert set(rows) == {handle.session_id, child}
    waits_on = child[len(handle.session_id) + 1 :]
    parent = rows[handle.session_id]
    assert parent[3] is not None  # hibernated since: the mark's ``at``
    assert parent[4:] == (
        None,
        waits_on,
        names.continuation_workflow_id(handle.session_id, handle.run_id, waits_on),
    )
    assert rows[child][5] is None  # the sub-agent waits on its own call's answer
    await runtime.interrupt(handle.session_id)
