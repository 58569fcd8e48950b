"""The deadline keeper's query and claim (``store/hibernated.py``) on revision 0010's index."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from helix_dbos.core.messages import Message
from helix_dbos.core.session import SessionState
from helix_dbos.errors import StaleStateError
from helix_dbos.store.hibernated import (
    DUE_INDEX,
    DueBatch,
    claim_due,
    claim_due_batches,
    due_sessions,
    touched_hibernated,
)
from helix_dbos.store.schema import LIVE_UPDATED_INDEX
from helix_dbos.store.store import SessionStore
from tests.store.stores import _store


async def _hibernated(store: SessionStore, session_id: str, due: int | None) -> None:
    state = SessionState(
        session_id=session_id,
        agent_type="a",
        root_session_id=session_id,
        status="suspended_client_tool",
        run_id="run_1",
    )
    if due is not None:
        state.metadata["hibernated"] = {"at": 1, "workflowId": "w", "step": 0, "dueAt": due}
    await store.create_session(state)


async def test_due_sessions_are_read_in_due_order_and_claimed_once(db_url: str) -> None:
    store = await _store(db_url)
    try:
        await _hibernated(store, "late", 2_000)
        await _hibernated(store, "early", 1_000)
        await _hibernated(store, "future", 9_000)
        await _hibernated(store, "awake", None)
        assert await due_sessions(store, 5_000, 10, ["a"]) == ["early", "late"]
        claims = await asyncio.gather(
            claim_due(store, "early", 5_000, 30_000), claim_due(store, "early", 5_000, 30_000)
        )
        assert sum(c is not None for c in claims) == 1  # two keepers: one claim
        assert await due_sessions(store, 5_000, 10, ["a"]) == ["late"]  # leased until 35,000
        assert await due_sessions(store, 35_000, 10, ["a"]) == ["late", "future", "early"]
        assert await claim_due(store, "future", 5_000, 30_000) is None
        assert await claim_due(store, "awake", 5_000, 30_000) is None
    finally:
        await store.close()


def _due_at(claimed: SessionState | DueBatch) -> int:
    mark = claimed.mark if isinstance(claimed, DueBatch) else claimed.metadata["hibernated"]
    return int(mark["dueAt"])


@pytest.mark.parametrize("claim_page", [claim_due_batches])
async def test_a_page_of_due_batches_is_claimed_once_by_two_keepers(
    db_url: str, claim_page: Any
) -> None:
    """Two keepers claiming pages at once claim every due batch exactly once, the most
    overdue first; a claimed batch is leased (not due again before the lease ends), its row's
    version moved on (a writer that read it before loses its compare-and-swap), and rows
    that are not due, not hibernated or of another agent are never claimed. (The whole rows
    claimed, or what the keeper's starts need.)"""
    store = await _store(db_url)
    try:
        for i in range(30):
            await _hibernated(store, f"due-{i:02}", 1_000 + i)
        await _hibernated(store, "future", 9_000)
        await _hibernated(store, "awake", None)
        other = SessionState(
            session_id="other-agent",
            agent_type="b",
            root_session_id="other-agent",
            status="suspended_client_tool",
            run_id="run_1",
            metadata={"hibernated": {"at": 1, "workflowId": "w", "step": 0, "dueAt": 5}},
        )
        await store.create_session(other)
        before = await store.get("due-00")

        async def keeper() -> list[Any]:
            # As a keeper's pass does: pages until one comes back short.
            got: list[Any] = []
            while True:
                page = await claim_page(store, 5_000, 30_000, 20, ["a"])
                got += page
                if len(page) < 20:
                    return got

        passes = await asyncio.gather(keeper(), keeper())
        claimed = [s.session_id for got in passes for s in got]
        assert sorted(claimed) == [f"due-{i:02}" for i in range(30)]  # each once, no other
        for got in passes:
            for state in got:
                assert _due_at(state) == 35_000
        assert await claim_page(store, 5_000, 30_000, 20, ["a"]) == []  # leased
        again = await claim_page(store, 35_000, 30_000, 100, ["a"])
        assert again[0].session_id == "future"  # the most overdue first
        assert {s.session_id for s in again} == {f"due-{i:02}" for i in range(30)} | {"future"}
        with pytest.raises(StaleStateError):
            await store.save(before)  # read before the claims: its swap loses
    finally:
        await store.close()


async def test_revision_0010_creates_the_index_the_query_uses(db_url: str) -> None:
    store = await _store(db_url)
    try:
        due, hibernated = store.backend.hibernated_due, store.backend.hibernated_row
        async with store.engine.connect() as conn:
            if store.dialect == "postgresql":
                found = await conn.scalar(
                    sa.text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"),
                    {"n": DUE_INDEX},
                )
                await conn.execute(sa.text("SET enable_seqscan = off"))
                plan = "\n".join(
                    str(r[0])
                    for r in await conn.execute(
                        sa.text(
                            f"EXPLAIN SELECT session_id FROM __agents_states WHERE {hibernated} "
                            f"AND {due} <= 5 ORDER BY {due} LIMIT 10"
                        )
                    )
                )
                assert DUE_INDEX in plan
            else:
                found = await conn.scalar(
                    sa.text("SELECT sql FROM sqlite_master WHERE name = :n"), {"n": DUE_INDEX}
                )
                plan = "\n".join(
                    str(r[-1])
                    for r in await conn.execute(
                        sa.text(
                            f"EXPLAIN QUERY PLAN SELECT session_id FROM __agents_states WHERE "
                            f"{hibernated} AND {due} <= 5 ORDER BY {due} LIMIT 10"
                        )
                    )
                )
                assert DUE_INDEX in plan
        assert found is not None
    finally:
        await store.close()


async def test_revision_0011_creates_the_index_the_reconcilers_page_uses(db_url: str) -> None:
    """The reconciler's page of live sessions reads revision 0011's partial index, which
    holds no hibernated row (before it, the page walked every hibernated session)."""
    store = await _store(db_url)
    try:
        live = store.backend.live_row
        query = (
            f"SELECT session_id FROM __agents_states WHERE updated_at < :cutoff AND {live} "
            "ORDER BY updated_at LIMIT 10"
        )
        cutoff = {"cutoff": datetime.now(UTC)}
        async with store.engine.connect() as conn:
            if store.dialect == "postgresql":
                found = await conn.scalar(
                    sa.text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"),
                    {"n": LIVE_UPDATED_INDEX},
                )
                await conn.execute(sa.text("SET enable_seqscan = off"))
                rows = await conn.execute(sa.text(f"EXPLAIN {query}"), cutoff)
                plan = "\n".join(str(r[0]) for r in rows)
            else:
                found = await conn.scalar(
                    sa.text("SELECT sql FROM sqlite_master WHERE name = :n"),
                    {"n": LIVE_UPDATED_INDEX},
                )
                rows = await conn.execute(sa.text(f"EXPLAIN QUERY PLAN {query}"), cutoff)
                plan = "\n".join(str(r[-1]) for r in rows)
        assert found is not None
        assert LIVE_UPDATED_INDEX in plan, plan
    finally:
        await store.close()


async def test_the_reconcilers_page_of_active_sessions_skips_hibernated_ones(db_url: str) -> None:
    """Hibernated rows have no workflow to judge: however many there are, they never fill
    the reconciler's page ahead of an active session that may be stuck."""
    from datetime import UTC, datetime, timedelta

    store = await _store(db_url)
    try:
        for i in range(3):
            await _hibernated(store, f"cold-{i}", 10**12)
        await _hibernated(store, "stuck", None)
        later = datetime.now(UTC) + timedelta(seconds=5)
        page = await store.settled_before(later, active=True, limit=1)
        assert [s.session_id for s in page] == ["stuck"]
        touched = await touched_hibernated(store, later - timedelta(minutes=10), later)
        assert sorted(s.session_id for s in touched) == ["cold-0", "cold-1", "cold-2"]
    finally:
        await store.close()


async def test_a_take_up_reads_the_record_with_the_rows_and_conversation(db_url: str) -> None:
    """``resume_recorded``: the hibernate commit's recorded state with the owner's and the
    root's rows and the owner's conversation; ``None`` for a slot that did not commit; the
    record alone (no rows) when the owner's row is missing."""
    store = await _store(db_url)
    try:
        await _hibernated(store, "root", 1_000)
        child = SessionState(session_id="kid", agent_type="a", root_session_id="root")
        await store.create_session(child)
        await store.append_messages("kid", "run_1", [Message(role="user", content="hi")])
        record = {"result": {"hibernated": True, "plan": []}}
        await store.write_checkpoint("kid", "run_1", step_count=0, state=record, checkpoint_id="s")
        done, read = await store.resume_recorded("kid", ["root"], "s")
        assert done == record and read is not None
        states, history = read
        assert sorted(states) == ["kid", "root"] and [m.content for m in history] == ["hi"]
        done, read = await store.resume_recorded("kid", ["root"], "no-such-slot")
        assert done is None and read is not None and sorted(read[0]) == ["kid", "root"]
        await store.write_checkpoint("root", "run_1", step_count=0, state=record, checkpoint_id="o")
        assert await store.resume_recorded("gone", ["root"], "o") == (record, None)
    finally:
        await store.close()


async def test_the_keepers_claim_returns_what_a_start_needs(db_url: str) -> None:
    """``claim_due_batches`` claims (the most overdue first, a
    lease, once) and returns each batch's session, agent, root, run and moved mark."""
    store = await _store(db_url)
    try:
        await _hibernated(store, "late", 2_000)
        await _hibernated(store, "early", 1_000)
        await _hibernated(store, "future", 9_000)
        before = await store.get("early")
        claimed = await claim_due_batches(store, 5_000, 30_000, 10, ["a"])
        assert claimed == [
            DueBatch("early", "a", "early", "run_1", {"at": 1, "workflowId": "w", "step": 0,
                                                      "dueAt": 35_000}),
            DueBatch("late", "a", "late", "run_1", {"at": 1, "workflowId": "w", "step": 0,
                                                    "dueAt": 35_000}),
        ]  # fmt: skip
        assert await claim_due_batches(store, 5_000, 30_000, 10, ["a"]) == []
        assert await claim_due_batches(store, 5_000, 30_000, 10, []) == []
        assert (await store.get("early")).version == before.version + 1
        with pytest.raises(StaleStateError):
            await store.save(before)
    finally:
        await store.close()
