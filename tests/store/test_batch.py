"""The writes of a transaction (``SessionStore.transact``), queued and sent as one statement
before COMMIT on Postgres: what they land as is what the same writes land as one by one (and
on SQLite, where they are still sent one by one)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from helix_dbos.core.events import EventType, event
from helix_dbos.core.messages import Message, ToolCall
from helix_dbos.core.session import SessionState
from helix_dbos.errors import StaleStateError
from helix_dbos.store.store import NoChange, SessionStore
from tests.psycopg_probe import record_commands
from tests.store.store_builders import pending_call, session


async def _count(store: SessionStore, table: str, session_id: str) -> int:
    async with store.engine.connect() as conn:
        found = await conn.execute(
            sa.text(f"SELECT COUNT(*) FROM {table} WHERE session_id = :s"), {"s": session_id}
        )
        return int(found.scalar_one())


def _usage(key: str, session_id: str = "s1") -> dict[str, Any]:
    return {"session_id": session_id, "source_type": "llm", "value": 1, "dedupe_key": key}


def _step_commit(
    store: SessionStore,
    session_id: str,
    rows: list[str],
    events: list[EventType],
    *,
    checkpoint: str = "slot",
    usage: str | None = None,
    prior: SessionState | None = None,
) -> Any:
    """A model step's commit as the runtime makes it: the assistant message (and a usage row
    keyed ``usage``), the rows' swap moving the checkpoint pointer, the events, the
    checkpoint."""

    async def commit() -> None:
        answer = [Message(role="assistant", content="x")]
        await store.append_messages(session_id, "r", answer)
        if usage is not None:
            await store.record_usage([_usage(usage, session_id)])
        with store.pointing(session_id, checkpoint) as pointed:
            if prior is not None:
                store.read_earlier([prior])
            await store.update(rows, lambda s: None)
        await store.append_events(session_id, "r", [event(t) for t in events])
        await store.write_checkpoint(
            session_id, "r", step_count=1, state={}, checkpoint_id=checkpoint,
            pointed=pointed.done,
        )  # fmt: skip

    return commit


@pytest.fixture
def statements() -> Iterator[list[str]]:
    """The statements every async psycopg cursor sends while the test runs."""
    sent: list[str] = []
    original = psycopg.AsyncCursor.execute

    async def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return await original(self, query, *args, **kwargs)

    psycopg.AsyncCursor.execute = execute  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.AsyncCursor.execute = original  # type: ignore[method-assign]


async def test_a_transaction_reads_its_own_queued_writes(store: SessionStore) -> None:
    """Every read in the transaction sees the writes made before it in the transaction."""

    async def body() -> None:
        await store.create_session(session("s1", status="running", run_id="r"))
        assert (await store.get("s1")).status == "running"
        await store.append_messages("s1", "r", [Message(role="user", content="hi")])
        assert [m.content for m in await store.load_messages("s1")] == ["hi"]
        assert await store.append_events("s1", "r", [event("turn_start")]) == 1
        assert [e.type for e in await store.read_events("s1")] == ["turn_start"]
        await store.write_checkpoint("s1", "r", step_count=1, state={}, checkpoint_id="c")
        assert (await store.get_checkpoint("c") or {})["message_count"] == 1
        assert (await store.latest_checkpoint("s1") or {})["checkpoint_id"] == "c"
        saved, _ = await store.update(["s1"], lambda s: None)
        assert saved["s1"].version == 1
        assert (await store.get("s1")).version == 1
        state, done, history = await store.step_inputs("s1", "c")
        assert (state.version, done, history) == (1, {}, [])

    await store.transact(body)
    assert (await store.get("s1")).version == 1


async def test_a_step_commit_lands_whole_with_its_compare_and_swap(store: SessionStore) -> None:
    """A model step's commit: the row's compare-and-swap (moving its checkpoint pointer), the
    message, usage, events and checkpoint all land, in order, with the sequences and counts
    the same writes have one by one."""
    await store.create_session(session("s1", status="running", run_id="r"))
    await store.append_messages("s1", "r", [Message(role="user", content="go")])
    assert await store.append_events("s1", "r", [event("turn_start")]) == 1

    async def commit() -> int:
        await store.append_messages(
            "s1",
            "r",
            [Message(role="assistant", tool_calls=[ToolCall(id="t1", name="ask", input={})])],
        )
        await store.record_usage([_usage("u1")])
        with store.pointing("s1", "slot") as pointed:

            def register(states: dict[str, SessionState]) -> None:
                states["s1"].pending["t1"] = pending_call("t1", "ask", "r")
                states["s1"].status = "suspended_client_tool"

            await store.update(["s1"], register)
        last = await store.append_events("s1", "r", [event("text"), event("suspended")])
        await store.write_checkpoint(
            "s1", "r", step_count=1, state={"ok": 1}, checkpoint_id="slot",
            pointed=pointed.done,
        )  # fmt: skip
        return last

    assert await store.transact(commit) == 3
    state = await store.get("s1")
    assert (state.version, state.status, list(state.pending)) == (
        1,
        "suspended_client_tool",
        ["t1"],
    )
    assert state.latest_checkpoint_id == "slot"
    assert [m.role for m in await store.load_messages("s1")] == ["user", "assistant"]
    assert [(e.sequence, e.type) for e in await store.read_events("s1")] == [
        (1, "turn_start"),
        (2, "text"),
        (3, "suspended"),
    ]
    checkpoint = await store.get_checkpoint("slot")
    assert checkpoint is not None
    assert (checkpoint["message_count"], checkpoint["state"]) == (2, {"ok": 1})
    assert await _count(store, "__agents_usage", "s1") == 1
    # The next append continues the sequence the row holds.
    assert await store.append_events("s1", "r", [event("text")]) == 4


@pytest.mark.postgres_only
async def test_a_step_commit_is_two_statements(
    pg_store: SessionStore, statements: list[str]
) -> None:
    """On Postgres the commit above is the lock of its rows and one statement of writes,
    between BEGIN and COMMIT (on the unit's driver connection, sent as statements)."""
    store = pg_store
    await store.create_session(session("s1", status="running", run_id="r"))
    await store.create_session(session("c1", root="s1", status="running", run_id="r"))
    statements.clear()

    await store.transact(_step_commit(store, "c1", ["c1", "s1"], ["text"], usage="u1"))
    assert len(statements) == 4 and (statements[0], statements[3]) == ("BEGIN", "COMMIT")
    assert "FOR UPDATE" in statements[1], statements
    assert (await store.get("c1")).latest_checkpoint_id == "slot"
    assert (await store.get("s1")).version == 1


async def test_a_commit_from_a_prior_read_is_one_statement(
    pg_store: SessionStore, statements: list[str]
) -> None:
    """A commit that starts from the row as read before it (``read``: a model step's read
    before its model call) sends its writes as one statement, no lock read; its events are
    numbered from the row as the swap finds it, after events appended since the read."""
    store = pg_store
    await store.create_session(session("s1", status="running", run_id="r"))
    prior = await store.get("s1")
    # Text deltas streamed while the model ran: the sequence moves, the version does not.
    await store.append_events("s1", "r", [event("text_delta"), event("text_delta")])
    statements.clear()

    await store.transact(_step_commit(store, "s1", ["s1"], ["text", "turn_end"], prior=prior))
    assert len(statements) == 1, statements
    events = await store.read_events("s1")
    assert [(e.sequence, e.type) for e in events] == [
        (1, "text_delta"),
        (2, "text_delta"),
        (3, "text"),
        (4, "turn_end"),
    ]
    assert await store.append_events("s1", "r", [event("text")]) == 5
    assert (await store.get("s1")).latest_checkpoint_id == "slot"


async def test_a_lone_flush_is_the_whole_transaction(
    pg_store: SessionStore, statements: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction that sends nothing but its flush sends it without BEGIN and COMMIT; a
    swap that lost in it writes nothing at all (a statement is atomic by itself, and its other
    parts write only if every swap landed)."""
    store = pg_store
    await store.create_session(session("s1", status="running", run_id="r"))
    commands = record_commands(monkeypatch)

    prior = await store.get("s1")
    statements.clear()
    await store.transact(
        _step_commit(store, "s1", ["s1"], ["text"], checkpoint="c1", usage="c1", prior=prior)
    )
    assert len(statements) == 1 and commands == [], (statements, commands)
    assert [e.sequence for e in await store.read_events("s1")] == [1]

    stale = await store.get("s1")
    await store.update(["s1"], lambda s: None)  # another writer moves the row on
    with pytest.raises(StaleStateError):
        await store.transact(
            _step_commit(store, "s1", ["s1"], ["text"], checkpoint="c2", usage="c2", prior=stale),
            attempts=1,
        )
    assert [m.content for m in await store.load_messages("s1")] == ["x"]
    assert [e.sequence for e in await store.read_events("s1")] == [1]
    assert await store.get_checkpoint("c2") is None
    assert await _count(store, "__agents_usage", "s1") == 1


async def test_a_commit_from_a_stale_prior_read_runs_again_on_the_row(
    store: SessionStore,
) -> None:
    """A row changed since the prior read (a stop, a new message) fails the swap: nothing of
    that attempt lands, not its events either, and the retried transaction decides on the row
    as it is now."""
    await store.create_session(session("s1", status="running", run_id="r"))
    prior = await store.get("s1")
    await store.update(["s1"], lambda s: setattr(s["s1"], "status", "interrupted"))
    seen: list[str] = []

    def finish(states: dict[str, SessionState]) -> None:
        seen.append(states["s1"].status)
        states["s1"].status = "completed"

    async def commit() -> None:
        await store.update(["s1"], finish)
        await store.append_events("s1", "r", [event("turn_end")])

    await store.transact(commit, read=[prior])
    assert seen == ["running", "interrupted"]
    assert [(e.sequence, e.type) for e in await store.read_events("s1")] == [(1, "turn_end")]


async def test_no_change_from_a_prior_read_is_decided_on_the_row(store: SessionStore) -> None:
    """A mutation that writes nothing has no swap to check the prior read: it is decided
    again on the row as it is now (a fence must see a stop that came after the read)."""
    await store.create_session(session("s1", status="running", run_id="r"))
    prior = await store.get("s1")
    await store.update(["s1"], lambda s: setattr(s["s1"], "status", "interrupted"))

    def unchanged(states: dict[str, SessionState]) -> None:
        raise NoChange(states["s1"].status)

    _, status = await store.transact(lambda: store.update(["s1"], unchanged), read=[prior])
    assert status == "interrupted"


async def test_a_re_decision_on_the_row_that_writes_saves_it(store: SessionStore) -> None:
    """A mutation that finds nothing to do on the earlier read, but something on the row as
    it is now, writes it: the re-decision saves what it changed, at the row's version."""
    await store.create_session(session("s1", status="running", run_id="r"))
    prior = await store.get("s1")
    await store.update(["s1"], lambda s: s["s1"].metadata.update(due=True))

    def claim(states: dict[str, SessionState]) -> str:
        s = states["s1"]
        if not s.metadata.get("due"):
            raise NoChange("nothing due")
        s.metadata["due"] = False
        s.metadata["claimed"] = True
        return "claimed"

    saved, value = await store.transact(lambda: store.update(["s1"], claim), read=[prior])
    assert value == "claimed"
    assert saved["s1"].version == prior.version + 2
    row = await store.get("s1")
    assert (row.version, row.metadata) == (prior.version + 2, {"due": False, "claimed": True})


async def test_a_lost_compare_and_swap_lands_nothing_of_its_transaction(
    store: SessionStore,
) -> None:
    """A compare-and-swap from a stale version fails the transaction: none of the writes
    queued with it (messages, usage, events, checkpoint) land, and the error names the row."""
    await store.create_session(session("s1", status="running", run_id="r"))
    stale = await store.get("s1")
    await store.update(["s1"], lambda s: None)  # another writer moves the row on

    async def commit() -> None:
        await store.append_messages("s1", "r", [Message(role="user", content="x")])
        await store.record_usage([_usage("u1")])
        await store.append_events("s1", "r", [event("text")])
        stale.status = "completed"
        await store.save(stale)
        await store.write_checkpoint("s1", "r", step_count=1, state={}, checkpoint_id="c")

    with pytest.raises(StaleStateError) as lost:
        await store.transact(commit, attempts=1)
    # The HTTP error body names the row that changed, and so does the lost race the log
    # line of a commit that gave up carries (its ``error``).
    assert lost.value.to_body()["sessionId"] == "s1"
    assert isinstance(lost.value.__cause__, StaleStateError)
    assert lost.value.__cause__.message == "Session 's1' changed since version 0"
    state = await store.get("s1")
    assert (state.version, state.status) == (1, "running")
    assert await store.load_messages("s1") == []
    assert await store.read_events("s1") == []
    assert await store.get_checkpoint("c") is None
    assert await _count(store, "__agents_usage", "s1") == 0
    # The row's sequence did not move either: the next event is the first.
    assert await store.append_events("s1", "r", [event("text")]) == 1


async def test_a_duplicate_checkpoint_still_raises_and_lands_nothing(
    store: SessionStore,
) -> None:
    """A second commit of the same step (same checkpoint id) fails with IntegrityError, which
    ``commit_once`` reads as "another execution won", and its other writes are rolled back."""
    await store.create_session(session("s1", status="running", run_id="r"))

    async def commit(text: str) -> None:
        await store.append_messages("s1", "r", [Message(role="assistant", content=text)])
        await store.update(["s1"], lambda s: None)
        await store.append_events("s1", "r", [event("text", text=text)])
        await store.write_checkpoint(
            "s1", "r", step_count=1, state={"text": text}, checkpoint_id="slot"
        )

    await store.transact(lambda: commit("first"))
    with pytest.raises(sa.exc.IntegrityError):
        await store.transact(lambda: commit("second"))
    assert [m.content for m in await store.load_messages("s1")] == ["first"]
    assert [e.data["text"] for e in await store.read_events("s1")] == ["first"]
    assert (await store.get_checkpoint("slot") or {})["state"] == {"text": "first"}
    assert (await store.get("s1")).version == 1


async def test_concurrent_duplicate_commits_one_wins(store: SessionStore) -> None:
    """Two executions of one step committing at once: one lands, the other raises
    IntegrityError (and the winner's result is the checkpoint's)."""
    await store.create_session(session("s1", status="running", run_id="r"))

    async def commit(text: str) -> str:
        async def body() -> str:
            await store.append_messages("s1", "r", [Message(role="assistant", content=text)])
            await store.append_events("s1", "r", [event("text", text=text)])
            await store.write_checkpoint(
                "s1", "r", step_count=1, state={"text": text}, checkpoint_id="slot"
            )
            return text

        return await store.transact(body)

    results = await asyncio.gather(commit("a"), commit("b"), return_exceptions=True)
    won = [r for r in results if isinstance(r, str)]
    assert len(won) == 1, results
    assert all(isinstance(r, sa.exc.IntegrityError) for r in results if not isinstance(r, str))
    assert (await store.get_checkpoint("slot") or {})["state"] == {"text": won[0]}
    assert [m.content for m in await store.load_messages("s1")] == won
    assert [(e.sequence, e.data["text"]) for e in await store.read_events("s1")] == [(1, won[0])]


async def test_a_duplicate_tool_result_still_fails(store: SessionStore) -> None:
    """The database's one-result-per-call rule holds for queued messages too."""
    await store.create_session(session("s1"))
    result = Message(role="tool", tool_call_id="t1", tool_name="ask", content="x")
    await store.transact(lambda: store.append_messages("s1", "r", [result]))
    with pytest.raises(sa.exc.IntegrityError):
        await store.transact(lambda: store.append_messages("s1", "r", [result]))
    assert len(await store.load_messages("s1")) == 1


async def test_concurrent_transactions_append_events_without_gaps(store: SessionStore) -> None:
    """Transactions that lock the row and append at once get disjoint, gapless sequences, and
    each learns its last sequence number without reading it back."""
    await store.create_session(session("s1"))

    async def writer(i: int) -> int:
        async def body() -> int:
            await store.update(["s1"], lambda s: None)
            return await store.append_events("s1", f"run-{i}", [event("text", i=i)] * 3)

        return await store.transact(body, attempts=50)

    lasts = await asyncio.gather(*(writer(i) for i in range(8)))
    events = await store.read_events("s1")
    assert [e.sequence for e in events] == list(range(1, 25))
    assert sorted(lasts) == list(range(3, 25, 3))
    for e in events:
        assert lasts[e.data["i"]] - 2 <= e.sequence <= lasts[e.data["i"]]


async def test_events_of_several_sessions_and_an_unlocked_one(store: SessionStore) -> None:
    """Interleaved appends to two locked rows, a new row and a row the transaction does not
    hold: each session's sequence is its own and gapless."""
    await store.create_session(session("a"))
    await store.create_session(session("b"))
    await store.create_session(session("free"))
    assert await store.append_events("a", None, [event("text")]) == 1

    async def body() -> list[int]:
        await store.update(["a", "b"], lambda s: None)
        await store.create_session(session("new"))
        return [
            await store.append_events("a", None, [event("text")] * 2),
            await store.append_events("b", None, [event("text")]),
            await store.append_events("free", None, [event("text")]),
            await store.append_events("new", None, [event("text")] * 2),
            await store.append_events("a", None, [event("text")]),
            await store.append_events("free", None, [event("text")]),
        ]

    assert await store.transact(body) == [3, 1, 1, 2, 4, 2]
    for sid, n in (("a", 4), ("b", 1), ("free", 2), ("new", 2)):
        assert [e.sequence for e in await store.read_events(sid)] == list(range(1, n + 1))
    assert await store.append_events("new", None, [event("text")]) == 3


async def test_a_checkpoint_counts_the_messages_queued_before_it(store: SessionStore) -> None:
    """``message_count`` defaults to the session's messages as the transaction sees them at
    the checkpoint: those queued before it, not those queued after."""
    await store.create_session(session("s1"))
    await store.append_messages("s1", None, [Message(role="user", content="0")])

    async def body() -> None:
        await store.append_messages(
            "s1", None, [Message(role="user", content="1"), Message(role="user", content="2")]
        )
        await store.append_messages("other", None, [Message(role="user", content="x")])
        await store.write_checkpoint("s1", None, step_count=1, state={}, checkpoint_id="c")
        await store.append_messages("s1", None, [Message(role="user", content="3")])

    await store.transact(body)
    assert (await store.get_checkpoint("c") or {})["message_count"] == 3
    assert [m.content for m in await store.load_messages("s1")] == ["0", "1", "2", "3"]


async def test_the_pointer_only_moves_forward_in_a_transaction(store: SessionStore) -> None:
    """``write_checkpoint`` in a transaction keeps its rule: the pointer moves only to a
    checkpoint newer than the one it names, whatever else the transaction writes."""
    await store.create_session(session("s1"))
    now = datetime.now(UTC)

    async def write(cp: str, at: datetime) -> None:
        await store.append_events("s1", None, [event("text")])  # a row write alongside
        await store.write_checkpoint(
            "s1", None, step_count=1, state={}, checkpoint_id=cp, created_at=at
        )

    async def both() -> None:
        await store.update(["s1"], lambda s: None)
        await write("new", now)
        await write("old", now - timedelta(seconds=5))

    await store.transact(both)
    assert (await store.get("s1")).latest_checkpoint_id == "new"
    await store.transact(lambda: write("older", now - timedelta(seconds=9)))
    assert (await store.get("s1")).latest_checkpoint_id == "new"
    await store.transact(lambda: write("newer", now + timedelta(seconds=1)))
    assert (await store.get("s1")).latest_checkpoint_id == "newer"
    assert [e.sequence for e in await store.read_events("s1")] == [1, 2, 3, 4]


async def test_usage_keys_are_kept_once_in_a_transaction(store: SessionStore) -> None:
    """A dedupe key seen twice in one transaction, or again in a later one, is one row."""
    await store.transact(lambda: store.record_usage([_usage("k"), _usage("k")]))
    await store.transact(lambda: store.record_usage([_usage("k"), _usage("k2")]))
    assert await _count(store, "__agents_usage", "s1") == 2


async def test_a_new_session_lands_with_its_entry(store: SessionStore) -> None:
    """A session created, given messages and events in one transaction: the row carries the
    events' sequence, and a second creation of the id fails as ever."""
    state = session("s1", status="running", run_id="r", metadata={"k": "v"}, error={"c": 1})

    async def start() -> SessionState:
        created = await store.create_session(state)
        await store.append_messages("s1", "r", [Message(role="user", content="go")])
        await store.append_events("s1", "r", [event("turn_start"), event("user_message")])
        return created

    assert (await store.transact(start)).version == 0
    assert await store.get("s1") == state.model_copy(update={"version": 0})
    assert await store.append_events("s1", "r", [event("text")]) == 3
    with pytest.raises(sa.exc.IntegrityError):
        await store.transact(start)
    assert len(await store.load_messages("s1")) == 1


async def test_queued_writes_wait_for_the_commit_on_postgres_only(
    store: SessionStore,
) -> None:
    """On Postgres the writes are not sent until the transaction commits (or reads them); on
    SQLite each is sent when made, as before."""
    await store.create_session(session("s1"))

    async def body() -> int:
        await store.append_messages("s1", None, [Message(role="user", content="x")])
        conn = store.bound()
        assert conn is not None
        found = await conn.execute(sa.text("SELECT COUNT(*) FROM __agents_messages"))
        return int(found.scalar_one())

    sent_at_once = await store.transact(body)
    assert sent_at_once == (0 if store.dialect == "postgresql" else 1)
    assert len(await store.load_messages("s1")) == 1


async def test_a_checkpoint_after_the_rows_own_write_moves_the_pointer(
    store: SessionStore,
) -> None:
    """A checkpoint written (unpointed) after its session was created, or compare-and-swapped,
    in the same transaction still moves the pointer: the row's write does not hide it."""

    async def create() -> None:
        await store.create_session(session("s1"))
        await store.write_checkpoint("s1", None, step_count=1, state={}, checkpoint_id="a")

    await store.transact(create)
    assert (await store.get("s1")).latest_checkpoint_id == "a"

    async def swap() -> None:
        await store.update(["s1"], lambda s: None)
        await store.write_checkpoint("s1", None, step_count=2, state={}, checkpoint_id="b")

    await store.transact(swap)
    state = await store.get("s1")
    assert (state.latest_checkpoint_id, state.version) == ("b", 1)


async def test_a_read_of_the_row_sees_its_queued_checkpoint_pointer(store: SessionStore) -> None:
    """A checkpoint queued with its pointer is a queued write of the session row: a read of
    the row later in the transaction sees the pointer moved."""
    await store.create_session(session("s1"))

    async def body() -> str | None:
        await store.write_checkpoint("s1", None, step_count=1, state={}, checkpoint_id="c")
        return (await store.get("s1")).latest_checkpoint_id

    assert await store.transact(body) == "c"


async def test_a_swap_from_a_prior_read_of_a_row_created_in_the_transaction_lands(
    store: SessionStore,
) -> None:
    """A swap from a row read before (no read of its own, so no flush) of a row this
    transaction creates: the creation is sent first, and the swap lands on it at the first
    attempt (a swap sent before its row would lose, and the transaction run again)."""

    runs = 0

    async def create_then_swap() -> None:
        nonlocal runs
        runs += 1
        created = await store.create_session(session("s2", status="running"))
        await store.append_events("s2", None, [event("turn_start")])
        store.read_earlier([created])
        await store.update(["s2"], lambda s: None)

    await store.transact(create_then_swap)
    assert runs == 1  # no lost race: the swap found the row created
    assert (await store.get("s2")).version == 1
    assert await store.append_events("s2", None, [event("text")]) == 2


async def test_two_swaps_of_a_row_in_a_transaction_both_land(store: SessionStore) -> None:
    """A second swap of a row, from the row the first swap saved (handed over, not read
    again), lands after the first: the first is sent before it, not replaced by it."""
    await store.create_session(session("s1"))

    runs = 0

    async def twice() -> None:
        nonlocal runs
        runs += 1
        saved, _ = await store.update(["s1"], lambda s: None)
        store.read_earlier([saved["s1"]])
        await store.update(["s1"], lambda s: None)

    await store.transact(twice)
    assert runs == 1  # no lost race: the second swap found the first one's version
    assert (await store.get("s1")).version == 2


async def test_events_of_a_held_row_join_its_later_swap_in_one_statement(
    pg_store: SessionStore, statements: list[str]
) -> None:
    """Events queued on a row the transaction holds, then a swap of it from a row handed
    over: one part of one statement (the swap carries the events' sequence), not a flush
    before the swap."""
    store = pg_store
    await store.create_session(session("s1"))

    async def body() -> None:
        saved, _ = await store.update(["s1"], lambda s: None)
        await store.get("s1")  # sends the swap: the row is held from now on
        statements.clear()
        await store.append_events("s1", None, [event("text")])
        store.read_earlier([saved["s1"]])
        await store.update(["s1"], lambda s: None)

    await store.transact(body)
    assert len([s for s in statements if "cas_states" in s or "new_events" in s]) == 1
    assert (await store.get("s1")).version == 2
    assert await store.append_events("s1", None, [event("text")]) == 2
