"""Exactly-once commits: a step's writes and its checkpoint commit together, once."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.exc import IntegrityError

from helix_dbos.core.messages import Message
from helix_dbos.core.session import SessionState
from helix_dbos.runtime._commits.once import CommitContext, Policy, commit_once, exactly_once
from helix_dbos.runtime._context import current
from helix_dbos.store.history import list_checkpoints
from helix_dbos.store.store import Fenced, guard
from tests.runtime.agents import editor_agent
from tests.runtime.conftest import MakeRuntime


@pytest.mark.parametrize("read_first", [True, False])
async def test_a_re_executed_step_writes_nothing_and_returns_the_first_result(
    make_runtime: MakeRuntime, read_first: bool
) -> None:
    """The second execution of a slot (a replay, or a concurrent duplicate) returns the first
    execution's result, and its writes are rolled back; without a first read, the
    checkpoint's key refuses the second copy."""
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
        await store.append_messages("s", "r", [Message(role="user", content=f"write {n}")])
        return {"execution": n}

    first = await commit_once(
        CommitContext("wf:1:test"), "s", "r", body, policy=Policy(read_first=read_first)
    )
    again = await commit_once(
        CommitContext("wf:1:test"), "s", "r", body, policy=Policy(read_first=read_first)
    )
    racing = await asyncio.gather(
        *[
            commit_once(
                CommitContext("wf:2:test"), "s", "r", body, policy=Policy(read_first=read_first)
            )
            for _ in range(5)
        ]
    )
    assert first == again == {"execution": 1}
    assert len({r["execution"] for r in racing}) == 1
    contents = [m.content for m in await store.load_messages("s")]
    assert contents.count("write 1") == 1 and len(contents) == 2
    state = await store.get("s")
    assert state.latest_checkpoint_id == "wf:2:test"


async def test_a_replay_fenced_by_its_own_landed_commit_returns_the_recorded_result(
    make_runtime: MakeRuntime,
) -> None:
    """Without a first read (the turn's results and finish commits), a replayed commit finds
    its run moved on by its own first execution: that is its recorded result, not a stop. A
    commit fenced with nothing recorded stays fenced."""
    runtime = await make_runtime([editor_agent()])
    store = runtime.store
    await store.create_session(
        SessionState(session_id="s", agent_type="editor", root_session_id="s", run_id="r")
    )
    calls = 0

    async def body() -> dict[str, int]:
        nonlocal calls
        calls += 1

        def move(states: dict[str, SessionState]) -> None:
            guard(states["s"], "r", ("idle",))
            states["s"].run_id = "r:continuation"

        await store.update(["s"], move)
        return {"execution": calls}

    first = await commit_once(
        CommitContext("wf:1:results"), "s", "r", body, policy=Policy(read_first=False)
    )
    # The body's swap of the step's own row carried the checkpoint's pointer.
    assert (await store.get("s")).latest_checkpoint_id == "wf:1:results"
    again = await commit_once(
        CommitContext("wf:1:results"), "s", "r", body, policy=Policy(read_first=False)
    )
    assert first == again == {"execution": 1}
    assert calls == 2  # the replay ran its body, was fenced, and read the recorded result
    with pytest.raises(Fenced):
        await commit_once(
            CommitContext("wf:2:results"), "s", "r", body, policy=Policy(read_first=False)
        )
    assert (await store.get("s")).run_id == "r:continuation"


async def test_a_re_executed_sub_agent_start_returns_its_recorded_result(
    make_runtime: MakeRuntime,
) -> None:
    """The record is read first: a second execution of a committed sub-agent start returns the
    recorded result, where running the body again would raise ``state_already_running``
    (the child session it created is running)."""
    from helix_dbos.runtime._commits.opening import open_turn

    runtime = await make_runtime([editor_agent()])
    store = runtime.store
    await store.create_session(
        SessionState(session_id="p", agent_type="editor", root_session_id="p", status="running")
    )

    async def start_child() -> dict[str, str]:
        await open_turn(
            store,
            session_id="p.call_1",
            agent_type="editor",
            turn_id="run_call_1",
            message="hi",
            root_session_id="p",
            parent_session_id="p",
        )
        return {"sessionId": "p.call_1"}

    first = await commit_once(
        CommitContext("wf:3:start_child"), "p.call_1", "run_call_1", start_child
    )
    again = await commit_once(
        CommitContext("wf:3:start_child"), "p.call_1", "run_call_1", start_child
    )
    assert first == again == {"sessionId": "p.call_1"}
    assert [m.content for m in await store.load_messages("p.call_1")] == ["hi"]


async def test_store_writes_in_a_step_join_its_transaction(make_runtime: MakeRuntime) -> None:
    """A write made without passing the step's connection still lands in the step's
    transaction: when the commit is rolled back, so is that write."""
    runtime = await make_runtime([editor_agent()])
    store = runtime.store
    await store.create_session(
        SessionState(session_id="s", agent_type="editor", root_session_id="s")
    )

    async def body() -> dict[str, int]:
        await store.append_messages("s", "r", [Message(role="user", content="inside")])
        raise RuntimeError("the step fails after its write")

    with pytest.raises(RuntimeError):
        await commit_once(CommitContext("wf:4:test"), "s", "r", body)
    assert await store.load_messages("s") == []
    assert await store.get_checkpoint("wf:4:test") is None


async def test_an_exactly_once_step_files_keyword_calls_like_positional_ones(
    make_runtime: MakeRuntime,
) -> None:
    """Its session and run are bound by name, so a call with keywords commits (and files its
    checkpoint under the same session) like a positional call."""
    runtime = await make_runtime([editor_agent()])
    await runtime.store.create_session(
        SessionState(session_id="s", agent_type="editor", root_session_id="s")
    )
    result = await _keyword_step(run_id="r1", session_id="s", value=7)
    assert result == {"value": 7}
    [checkpoint] = [c for c in [await runtime.store.latest_checkpoint("s")] if c is not None]
    assert (checkpoint["session_id"], checkpoint["run_id"]) == ("s", "r1")


@exactly_once("helix.test.keyword_step", "finish")
async def _keyword_step(session_id: str, run_id: str, value: int) -> dict[str, int]:
    return {"value": value}


async def test_an_exactly_once_step_called_positionally_files_its_checkpoint(
    make_runtime: MakeRuntime,
) -> None:
    """A positional call binds its session and run like a keyword call (the step and its
    ``direct`` form both take positional arguments); the checkpoint of a commit that is not a
    model step counts no step."""
    runtime = await make_runtime([editor_agent()])
    await runtime.store.create_session(
        SessionState(session_id="s", agent_type="editor", root_session_id="s")
    )
    assert await _keyword_step("s", "r1", 7) == {"value": 7}
    assert await _keyword_step.direct(CommitContext("wf:5:finish"), "s", "r2", 8) == {"value": 8}
    async with runtime.store.reading():
        [listed] = await list_checkpoints("s", "wf:5:finish")
    assert (listed.session_id, listed.run_id, listed.step_count) == ("s", "r2", 0)


_bodies: list[str] = []


@exactly_once("helix.test.read_first_step", "finish")
async def _read_first_step(session_id: str, run_id: str, text: str) -> dict[str, str]:
    _bodies.append(text)
    await current().store.append_messages(session_id, run_id, [Message(role="user", content=text)])
    return {"text": text}


@exactly_once("helix.test.unread_step", "finish", policy=Policy(read_first=False))
async def _unread_step(session_id: str, run_id: str, text: str) -> dict[str, str]:
    _bodies.append(text)
    await current().store.append_messages(session_id, run_id, [Message(role="user", content=text)])
    return {"text": text}


async def test_an_exactly_once_step_runs_again_under_its_slot_as_its_read_first_says(
    make_runtime: MakeRuntime,
) -> None:
    """Run again under the same slot (a replay), a step that reads first returns the recorded
    result without running its body; one that does not (``read_first=False``) runs its body,
    and the checkpoint's key refuses its writes. Either way the writes land once, under the
    slot given."""
    runtime = await make_runtime([editor_agent()])
    store = runtime.store
    await store.create_session(
        SessionState(session_id="s", agent_type="editor", root_session_id="s")
    )
    _bodies.clear()
    for _ in range(2):
        assert await _read_first_step.direct(CommitContext("wf:6:finish"), "s", "r", "read") == {
            "text": "read"
        }
    assert _bodies == ["read"]
    for _ in range(2):
        assert await _unread_step.direct(CommitContext("wf:7:finish"), "s", "r", "unread") == {
            "text": "unread"
        }
    assert _bodies == ["read", "unread", "unread"]
    assert [m.content for m in await store.load_messages("s")] == ["read", "unread"]
    async with store.reading():
        slots = {c.checkpoint_id for c in await list_checkpoints("s")}
    assert slots == {"wf:6:finish", "wf:7:finish"}


async def test_a_commit_refused_by_another_key_fails_with_that_error(
    make_runtime: MakeRuntime,
) -> None:
    """An ``IntegrityError`` is read as a concurrent execution of the same slot only when that
    execution's checkpoint is there: one of another key (here the session's own, created
    twice) fails the commit with that error, and nothing is recorded under the slot."""
    runtime = await make_runtime([editor_agent()])
    store = runtime.store
    await store.create_session(
        SessionState(session_id="s", agent_type="editor", root_session_id="s")
    )

    async def body() -> dict[str, int]:
        await store.create_session(
            SessionState(session_id="s", agent_type="editor", root_session_id="s")
        )
        return {"created": 1}

    for read_first in (True, False):
        with pytest.raises(IntegrityError):
            await commit_once(
                CommitContext("wf:1:test"), "s", "r", body, policy=Policy(read_first=read_first)
            )
    async with store.reading():
        assert await list_checkpoints("s") == []
