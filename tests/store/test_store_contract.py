"""The session store's contract, on Postgres and SQLite alike."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from helix_dbos.core.events import event
from helix_dbos.core.messages import Message, ToolCall
from helix_dbos.core.session import SessionState, Tombstone
from helix_dbos.errors import SessionNotFoundError, StaleStateError, StateSizeExceededError
from helix_dbos.store.schema import usage
from helix_dbos.store.store import SessionStore
from tests.store.store_builders import now_ms, pending_call, session

# -- sessions -------------------------------------------------------------------------------


async def test_create_then_load_round_trips(store: SessionStore) -> None:
    """Every field written at creation reads back unchanged, at version 0."""
    state = session(
        "s1",
        status="suspended_client_tool",
        run_id="run-1",
        workflow_id="wf-1",
        metadata={"tenant": "acme", "n": 1},
        error={"code": "x"},
    )
    state.pending["c1"] = pending_call("c1", "confirm_dialog", "run-1")
    state.ownership["c1"] = "s1"
    state.completed["c0"] = Tombstone(
        completed_at=now_ms(),
        outcome="answered",
        run_id="run-0",
        owner_session_id="s1",
        retention_ms=60_000,
    )
    created = await store.create_session(state)
    assert created.version == 0
    loaded = await store.load("s1")
    assert loaded == state.model_copy(update={"version": 0})
    assert await store.get("s1") == loaded


async def test_unknown_session(store: SessionStore) -> None:
    """load answers None; get raises SessionNotFoundError with the id."""
    assert await store.load("missing") is None
    with pytest.raises(SessionNotFoundError) as info:
        await store.get("missing")
    assert info.value.code == "state_not_found"
    assert info.value.details == {"sessionId": "missing"}
    with pytest.raises(SessionNotFoundError):
        await store.update(["missing"], lambda states: None)


async def test_duplicate_session_id_is_refused(store: SessionStore) -> None:
    """A session id is created once."""
    await store.create_session(session("s1"))
    with pytest.raises(sa.exc.IntegrityError):
        await store.create_session(session("s1"))


async def test_absent_json_is_sql_null(store: SessionStore) -> None:
    """No tombstones and no error are SQL NULL (as in rows older than 0004), not JSON null."""
    await store.create_session(session("s1"))
    async with store.engine.connect() as conn:
        row = (
            await conn.execute(
                sa.text(
                    "SELECT completed_client_tool_calls IS NULL, error IS NULL,"
                    " latest_checkpoint_id IS NULL FROM __agents_states"
                )
            )
        ).one()
    assert tuple(map(bool, row)) == (True, True, True)
    state = await store.get("s1")
    assert (state.completed, state.error) == ({}, None)


async def test_save_is_compare_and_swap(store: SessionStore) -> None:
    """save bumps the version; a save at an old version raises StaleStateError, row unchanged."""
    v0 = await store.create_session(session("s1"))
    v1 = await store.save(v0.model_copy(update={"status": "running"}))
    assert v1.version == 1
    with pytest.raises(StaleStateError) as info:
        await store.save(v0.model_copy(update={"status": "failed"}))
    assert info.value.code == "state_conflict"
    current = await store.get("s1")
    assert (current.status, current.version) == ("running", 1)
    v2 = await store.save(current.model_copy(update={"status": "completed"}))
    assert (v2.version, (await store.get("s1")).status) == (2, "completed")


async def test_update_returns_the_mutation_value(store: SessionStore) -> None:
    """update hands mutate the current states and returns the saved states and its value."""
    await store.create_session(session("s1"))

    def mutate(states: dict[str, SessionState]) -> str:
        states["s1"].status = "running"
        return "done"

    saved, value = await store.update(["s1"], mutate)
    assert value == "done"
    assert saved["s1"].status == "running"
    assert saved["s1"].version == 1


async def test_pending_map_size_limit(migrated_url: str) -> None:
    """A store with max_state_bytes refuses a pending map over it and writes nothing."""
    store = SessionStore.from_url(migrated_url, max_state_bytes=400)
    try:
        v0 = await store.create_session(session("s1"))
        big = v0.model_copy(deep=True)
        for i in range(5):
            big.pending[f"c{i}"] = pending_call(f"c{i}", "confirm_dialog", "run-1", index=i)
        with pytest.raises(StateSizeExceededError) as info:
            await store.save(big)
        assert info.value.details["limitBytes"] == 400
        assert (await store.get("s1")).pending == {}
    finally:
        await store.close()


async def test_list_sessions_and_descendants(store: SessionStore) -> None:
    """list_sessions filters and puts the newest first; descendants lists a tree without its root."""
    await store.create_session(session("root", agent_type="planner"))
    await store.create_session(session("child", root="root"))
    await store.create_session(session("grandchild", root="root", parent_session_id="child"))
    await store.create_session(session("other"))
    await store.save((await store.get("root")).model_copy(update={"status": "running"}))
    assert [s.session_id for s in await store.list_sessions(limit=1)] == ["root"]
    assert [s.session_id for s in await store.list_sessions(status="running")] == ["root"]
    assert [s.session_id for s in await store.list_sessions(agent_type="planner")] == ["root"]
    assert [s.session_id for s in await store.descendants("root")] == ["child", "grandchild"]
    # ``tree``: the session first, then its root's other sessions but the root, by creation.
    assert [s.session_id for s in await store.tree("root")] == ["root", "child", "grandchild"]
    assert [s.session_id for s in await store.tree("child")] == ["child", "grandchild"]
    assert [s.session_id for s in await store.tree("grandchild")] == ["grandchild", "child"]
    assert [s.session_id for s in await store.tree("other")] == ["other"]
    with pytest.raises(SessionNotFoundError):
        await store.tree("missing")
    many = await store.load_many(["root", "missing", "other"])
    assert set(many) == {"root", "other"}


# -- messages -------------------------------------------------------------------------------


async def test_messages_keep_their_order(store: SessionStore) -> None:
    """Messages read back in append order, across appends, per session."""
    await store.create_session(session("s1"))
    await store.create_session(session("s2"))
    first = [
        Message(role="system", content="be brief"),
        Message(role="user", content="hello"),
        Message(
            role="assistant",
            content="checking",
            tool_calls=[ToolCall(id="c1", name="t", input={"a": 1})],
        ),
    ]
    await store.append_messages("s1", "run-1", first)
    await store.append_messages("s2", "run-9", [Message(role="user", content="elsewhere")])
    second = [
        Message(role="tool", tool_call_id="c1", tool_name="t", result={"v": [1, 2]}),
        Message(role="assistant", content="done"),
    ]
    await store.append_messages("s1", "run-1", second)
    await store.append_messages("s1", "run-1", [])
    assert await store.load_messages("s1") == first + second
    assert await store.load_messages("s2") == [Message(role="user", content="elsewhere")]


# -- events ---------------------------------------------------------------------------------


async def test_events_resume_from_an_offset(store: SessionStore) -> None:
    """Sequences are 1..n with no gap; reading after k returns exactly k+1..n."""
    await store.create_session(session("s1"))
    assert await store.append_events("s1", "run-1", [event("turn_start")]) == 1
    last = await store.append_events(
        "s1", "run-1", [event("text_delta", text=str(i)) for i in range(5)]
    )
    assert last == 6
    assert await store.append_events("s1", "run-1", []) == 0
    everything = await store.read_events("s1")
    assert [e.sequence for e in everything] == [1, 2, 3, 4, 5, 6]
    assert everything[0].type == "turn_start"
    assert [e.data["text"] for e in everything[1:]] == ["0", "1", "2", "3", "4"]
    for offset in range(7):
        resumed = await store.read_events("s1", after=offset)
        assert [e.sequence for e in resumed] == list(range(offset + 1, 7))
    assert [e.sequence for e in await store.read_events("s1", after=2, limit=2)] == [3, 4]


async def test_concurrent_event_appends_have_no_gap(store: SessionStore) -> None:
    """Writers appending at once get disjoint sequences that together are 1..n."""
    await store.create_session(session("s1"))
    lasts = await asyncio.gather(
        *(store.append_events("s1", f"run-{i}", [event("text", i=i)] * 3) for i in range(8))
    )
    events = await store.read_events("s1")
    assert [e.sequence for e in events] == list(range(1, 25))
    assert sorted(lasts) == list(range(3, 25, 3))
    for e in events:  # each writer's three events are consecutive
        assert e.run_id == f"run-{e.data['i']}"
    by_run: dict[str | None, list[int]] = {}
    for e in events:
        by_run.setdefault(e.run_id, []).append(e.sequence)
    assert all(s[-1] - s[0] == 2 for s in by_run.values())


async def test_events_of_unknown_session(store: SessionStore) -> None:
    """Appending to a session that does not exist fails and stores nothing."""
    with pytest.raises(sa.exc.NoResultFound):
        await store.append_events("missing", None, [event("text")])
    assert await store.read_events("missing") == []


# -- usage ----------------------------------------------------------------------------------


async def test_usage_dedupe_key(store: SessionStore) -> None:
    """The same dedupe_key twice is one row; rows without a key are all kept."""
    row = {
        "kind": "custom",
        "source_type": "client_tool_wait_ms",
        "source_name": "pick_file",
        "data": {"value": 1500},
        "timestamp": now_ms(),
        "dedupe_key": "run-1:c1:wait",
    }
    await store.record_usage([row])
    await store.record_usage([row, {**row, "data": {"value": 9}}])
    await store.record_usage([{**row, "dedupe_key": None}, {**row, "dedupe_key": None}])
    await store.record_usage([{"source_type": "client_tool_timeout", "source_name": "t"}])
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.select(usage).order_by(usage.c.id))).all()
    assert [(r.dedupe_key, r.data) for r in rows] == [
        ("run-1:c1:wait", {"value": 1500}),
        (None, {"value": 1500}),
        (None, {"value": 1500}),
        (None, {"value": 1}),
    ]
    defaults = rows[-1]
    assert defaults.kind == "custom"
    assert abs(defaults.timestamp - now_ms()) < 60_000


# -- checkpoints ----------------------------------------------------------------------------


async def test_latest_checkpoint_is_the_last_written(store: SessionStore) -> None:
    """The pointer names the most recently written checkpoint, even with a lower step count.

    Ordering by step count returned the previous turn's checkpoint and truncated the new turn's
    messages (the runbook's "unexpected tool_use_id" bug).
    """
    await store.create_session(session("s1"))
    assert await store.latest_checkpoint("s1") is None
    turn1 = await store.write_checkpoint(
        "s1", "run-1", step_count=7, message_count=12, state={"turn": 1}
    )
    assert (await store.latest_checkpoint("s1") or {})["checkpoint_id"] == turn1
    # The next turn restarts its step count: its suspension checkpoint has a LOWER step count.
    turn2 = await store.write_checkpoint(
        "s1", "run-2", step_count=1, message_count=15, state={"turn": 2}
    )
    latest = await store.latest_checkpoint("s1")
    assert latest is not None
    assert latest["checkpoint_id"] == turn2
    assert (latest["step_count"], latest["message_count"], latest["state"]) == (1, 15, {"turn": 2})
    assert latest["run_id"] == "run-2"
    assert (await store.get("s1")).latest_checkpoint_id == turn2
    # Both checkpoints are kept; the pointer decides, not the step count.
    async with store.engine.connect() as conn:
        count = (
            await conn.execute(sa.text("SELECT COUNT(*) FROM __agents_checkpoints"))
        ).scalar_one()
    assert count == 2


async def test_checkpoint_pointer_survives_session_writes(store: SessionStore) -> None:
    """A CAS write of a state read before the checkpoint cannot move the pointer back."""
    await store.create_session(session("s1"))
    cp = await store.write_checkpoint("s1", "run-1", step_count=1, message_count=1, state={})
    state = await store.get("s1")
    assert state.latest_checkpoint_id == cp
    await store.update(["s1"], lambda states: None)
    assert (await store.latest_checkpoint("s1") or {})["checkpoint_id"] == cp


async def test_checkpoints_are_per_session(store: SessionStore) -> None:
    """Another session's newer checkpoint is not this session's latest."""
    await store.create_session(session("s1"))
    await store.create_session(session("s2"))
    mine = await store.write_checkpoint("s1", None, step_count=3, message_count=3, state={})
    await store.write_checkpoint("s2", None, step_count=9, message_count=9, state={})
    assert (await store.latest_checkpoint("s1") or {})["checkpoint_id"] == mine
