"""The decision record's queries (Postgres and SQLite): rows queued in a unit of work land with
it and a replayed key lands once; the list is newest first, filtered, paged by its cursor
without skipping or repeating; the purge deletes what is older than the retention only; on
Postgres each filter is an index range scan in the list's order."""

from __future__ import annotations

import asyncio
import re

import psycopg
import pytest

from helix_dbos.core.clock import now_ms
from helix_dbos.errors import RequestValidationError
from helix_dbos.store import decisions
from helix_dbos.store.decisions import DecisionQuery, decisions_sql, list_decisions
from helix_dbos.store.store import SessionStore
from tests.store.decision_rows import row, write

DAY_MS = 86_400_000


async def test_the_record_is_listed_newest_first_and_paged(store: SessionStore) -> None:
    now = now_ms()
    # Two rows share a time: the id orders them.
    await write(store, [row(i, now - (i // 2) * 1000) for i in range(40)])
    await write(store, [row(0, now + 5)])  # a replayed key: dropped
    page = await list_decisions(store, DecisionQuery(limit=500))
    assert len(page.decisions) == 40 and page.next_cursor is None
    keys = [(d.decided_at, d.id) for d in page.decisions]
    assert keys == sorted(keys, reverse=True)
    assert page.decisions[-1].roles is None and page.decisions[-2].roles == ["finance"]

    seen: list[int] = []
    cursor = None
    while True:
        part = await list_decisions(store, DecisionQuery(limit=7, cursor=cursor))
        seen += [d.id for d in part.decisions]
        cursor = part.next_cursor
        if cursor is None:
            break
    assert seen == [d.id for d in page.decisions]

    by = await list_decisions(store, DecisionQuery(principal="approver1", owner_tenant="tenant1"))
    assert {(d.principal, d.owner_tenant) for d in by.decisions} == {("approver1", "tenant1")}
    denied = await list_decisions(store, DecisionQuery(outcome="denied", since=now - 5_000))
    assert [d.tool_call_id for d in denied.decisions] == ["c0", "c5", "c10"]
    one = await list_decisions(store, DecisionQuery(approval_id="r::c7"))
    assert [d.dump()["approvalId"] for d in one.decisions] == ["r::c7"]
    for bad in (DecisionQuery(limit=0), DecisionQuery(outcome="maybe"), DecisionQuery(cursor="x")):
        with pytest.raises(RequestValidationError):
            await list_decisions(store, bad)

    # The record's own retention: only what is older than it goes.
    assert await decisions.purge_decisions(store, now - 10_000) == 18
    left = await list_decisions(store, DecisionQuery(limit=500))
    assert len(left.decisions) == 22 and min(d.decided_at for d in left.decisions) > now - 11_000


def _plan(url: str, query: DecisionQuery) -> str:
    """The plan Postgres runs a page with: the text statement (``decisions_sql``), prepared,
    with the generic plan the store's read connections use (``force_generic_plan``)."""
    sql, params = decisions_sql(query)
    names = re.findall(r"%\((\w+)\)s", sql)
    for n, name in enumerate(names, start=1):
        sql = sql.replace(f"%({name})s", f"${n}", 1)
    values = ", ".join(
        str(params[name]) if isinstance(params[name], int) else f"'{params[name]}'"
        for name in names
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE page AS {sql}")
        return "\n".join(r[0] for r in conn.execute(f"EXPLAIN EXECUTE page({values})"))


@pytest.mark.postgres_only
async def test_the_lists_are_index_scans_in_order(migrated_pg_url: str) -> None:
    """With 20,000 decisions, each filter's page reads its index backward: no sort, no scan
    of the table."""
    now = now_ms()
    with psycopg.connect(migrated_pg_url) as conn:
        conn.execute(
            """
            INSERT INTO __agents_approval_decisions (decision_key, approval_id, session_id,
                root_session_id, run_id, tool_call_id, tool_name, outcome, final, credential,
                principal, owner_principal, owner_tenant, decided_at)
            SELECT 'k' || i, 'r::c' || i, 's' || mod(i, 900), 's' || mod(i, 900), 'r',
                'c' || i, 'tool' || mod(i, 5), 'approved', true, 'hook',
                'approver' || mod(i, 200), 'user' || mod(i, 1000), 'tenant' || mod(i, 10),
                %(now)s - i * 1000
            FROM generate_series(1, 20000) AS i
            """,
            {"now": now},
        )
        conn.execute("ANALYZE __agents_approval_decisions")
    cursor = f"{now - 5_000_000}.15000"
    for index, query in (
        ("newest", DecisionQuery()),
        ("newest", DecisionQuery(cursor=cursor)),
        ("owner_tenant", DecisionQuery(owner_tenant="tenant3")),
        ("principal", DecisionQuery(principal="approver7")),
    ):
        plan = _plan(migrated_pg_url, query)
        assert f"Index Scan Backward using ix___agents_approval_decisions_{index}" in plan, (
            query,
            plan,
        )
        assert "Sort" not in plan and "Seq Scan" not in plan, (query, plan)
    # One owner's or one approval's few decisions: found by their index (the planner may
    # sort those few).
    for index, query in (
        ("owner_principal", DecisionQuery(owner_principal="user7")),
        ("approval_id", DecisionQuery(approval_id="r::c77")),
    ):
        plan = _plan(migrated_pg_url, query)
        assert f"ix___agents_approval_decisions_{index}" in plan and "Seq Scan" not in plan


async def test_the_purge_goes_in_small_batches_oldest_first(store: SessionStore) -> None:
    now = now_ms()
    await write(store, [row(i, now - 10 * DAY_MS - i) for i in range(23)])
    await write(store, [row(100 + i, now - i) for i in range(4)])
    assert await decisions.purge_batch(store, now - DAY_MS, batch=5) == 5
    left = await list_decisions(store, DecisionQuery(limit=500))
    # The oldest five went first (row 22 is the oldest).
    assert {d.approval_id for d in left.decisions}.isdisjoint({f"r::c{i}" for i in range(18, 23)})
    assert await decisions.purge_decisions(store, now - DAY_MS, batch=5) == 18
    left = await list_decisions(store, DecisionQuery(limit=500))
    assert len(left.decisions) == 4


@pytest.mark.postgres_only
async def test_two_sweepers_delete_each_decision_once(migrated_pg_url: str) -> None:
    first, second = SessionStore.from_url(migrated_pg_url), SessionStore.from_url(migrated_pg_url)
    try:
        now = now_ms()
        await write(first, [row(i, now - 30 * DAY_MS - i) for i in range(1_200)])
        deleted = await asyncio.gather(
            decisions.purge_decisions(first, now - DAY_MS, batch=40),
            decisions.purge_decisions(second, now - DAY_MS, batch=40),
        )
        assert sum(deleted) == 1_200, deleted
        assert (await list_decisions(first, DecisionQuery())).decisions == []
    finally:
        await first.close()
        await second.close()
