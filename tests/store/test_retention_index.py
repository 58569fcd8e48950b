"""The retention sweeper's page of ended roots reads revision 0013's partial index, which holds
no live, parked or hibernated row: however many sessions wait, a sweep reads the ended roots it
returns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from helix_dbos.store.schema import ENDED_ROOT, ENDED_ROOTS_INDEX, states
from tests.store.stores import _store


async def test_revision_0013_creates_the_index_the_sweepers_page_uses(db_url: str) -> None:
    store = await _store(db_url)
    try:
        # The statement of store/retention.py's _candidate_roots, with a default retention.
        query = (
            f"SELECT session_id, updated_at FROM __agents_states WHERE {ENDED_ROOT}"
            " AND ((updated_at < :cut_default)) ORDER BY updated_at, session_id LIMIT 50"
        )
        cut = {"cut_default": datetime.now(UTC)}
        async with store.engine.connect() as conn:
            if store.dialect == "postgresql":
                found = await conn.scalar(
                    sa.text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"),
                    {"n": ENDED_ROOTS_INDEX},
                )
                await conn.execute(sa.text("SET enable_seqscan = off"))
                rows = await conn.execute(sa.text(f"EXPLAIN {query}"), cut)
                plan = "\n".join(str(r[0]) for r in rows)
            else:
                found = await conn.scalar(
                    sa.text("SELECT sql FROM sqlite_master WHERE name = :n"),
                    {"n": ENDED_ROOTS_INDEX},
                )
                rows = await conn.execute(sa.text(f"EXPLAIN QUERY PLAN {query}"), cut)
                plan = "\n".join(str(r[-1]) for r in rows)
        assert found is not None
        assert ENDED_ROOTS_INDEX in plan, plan
    finally:
        await store.close()


async def test_revision_0014_indexes_the_reconcilers_orphan_lookup(db_url: str) -> None:
    """The reconciler's lookup of the sessions of a page of PENDING workflows reads revision
    0014's index on ``workflow_id`` (before it, the lookup walked every session by
    ``updated_at``, hibernated ones included: 1.2-1.8 s beside 1,000,000 of them)."""
    store = await _store(db_url)
    try:
        # Many parked sessions written before the cutoff, as beside a crowd of hibernated
        # ones (the statistics then say that ``updated_at`` selects them all).
        at = datetime.now(UTC) - timedelta(hours=1)
        crowd = [
            {"session_id": f"s{i}", "agent_type": "a", "root_session_id": f"s{i}",
             "status": "suspended_client_tool", "workflow_id": f"helix:s{i}:r",
             "created_at": at, "updated_at": at}
            for i in range(20_000)
        ]  # fmt: skip
        async with store.engine.begin() as conn:
            await conn.execute(states.insert(), crowd)
            await conn.execute(sa.text("ANALYZE __agents_states"))
        ids = [f"helix:ses_{i:032x}:run_x" for i in range(50)]
        captured: list[str] = []

        def capture(conn: object, cursor: object, statement: str, *_: object) -> None:
            if "workflow_id IN" in statement:
                captured.append(statement)

        sa.event.listen(store.engine.sync_engine, "before_cursor_execute", capture)
        try:
            assert (
                await store.settled_before(datetime.now(UTC), active=False, workflow_ids=ids) == []
            )
        finally:
            sa.event.remove(store.engine.sync_engine, "before_cursor_execute", capture)
        # The statement the store sends: the ids, and no ORDER BY ... LIMIT that would let
        # the planner walk updated_at instead.
        assert captured and "ORDER BY" not in captured[0], captured
        async with store.engine.connect() as conn:
            if store.dialect == "postgresql":
                # A table this small is read whole; of the indexes, the lookup's is taken.
                await conn.execute(sa.text("SET enable_seqscan = off"))
                query = (
                    "EXPLAIN SELECT * FROM __agents_states WHERE updated_at < now()"
                    " AND status NOT IN ('running', 'suspended_client_tool')"
                    " AND workflow_id = ANY(:ids)"
                )
                rows = await conn.execute(sa.text(query), {"ids": ids})
                plan = "\n".join(str(r[0]) for r in rows)
            else:
                marks = ", ".join(f"'{i}'" for i in ids)
                query = (
                    "EXPLAIN QUERY PLAN SELECT * FROM __agents_states WHERE"
                    " status NOT IN ('running', 'suspended_client_tool')"
                    f" AND workflow_id IN ({marks})"
                )
                rows = await conn.execute(sa.text(query))
                plan = "\n".join(str(r[-1]) for r in rows)
        assert "ix___agents_states_workflow_id" in plan, plan
    finally:
        await store.close()
