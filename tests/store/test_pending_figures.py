"""What the metrics' pending gauges read, on both backends: approvals from the inbox's table,
client calls from the pending maps of the rows written within the client window; answered,
superseded, lapsed and ended calls never count; on Postgres, the statement reads indexes."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import psycopg
import pytest
import sqlalchemy as sa

from helix_dbos.observability.approval_metrics import PendingFigures
from helix_dbos.store import pending_figures as figures_module
from helix_dbos.store.dialect import Postgres, SQLite
from helix_dbos.store.pending_figures import pending_figures
from helix_dbos.store.store import SessionStore
from tests.store.pending_rows import WINDOW_MS, call, parked

from .store_builders import now_ms


def by_tool(found: PendingFigures) -> dict[tuple[str, str], int]:
    return {
        **{("approval", tool): n for tool, n in found.approvals.items()},
        **{("client", tool): n for tool, n in found.client_calls.items()},
    }


async def test_pending_figures_count_what_waits_by_tool(store: SessionStore) -> None:
    old = now_ms() - 2 * 3_600_000
    await parked(
        store,
        "s1",
        call("a1", "transfer", "approval", registered=old, deadline=now_ms() + 3_600_000),
        call("a2", "transfer", "approval"),
        call("c1", "ask", "client"),
    )
    await parked(store, "s2", call("a3", "refund", "approval"), call("c2", "ask", "client"))
    # Not waiting: an answered call, a call of a superseded run, a lapsed client call and a
    # lapsed approval (their turn has not settled them yet), and the calls of a session that
    # ended.
    older = old - 3_600_000
    await parked(
        store,
        "s3",
        call("c3", "ask", "client", answered=True),
        call("a4", "transfer", "approval", run="run_0"),
        call("c4", "ask", "client", registered=now_ms() - 10_000, deadline=now_ms() - 1),
        call("a6", "refund", "approval", registered=older, deadline=now_ms() - 1),
    )
    await parked(store, "s4", call("a5", "transfer", "approval"), status="failed")

    found = await pending_figures(store, client_window_ms=WINDOW_MS)
    assert by_tool(found) == {
        ("approval", "transfer"): 2,
        ("approval", "refund"): 1,
        ("client", "ask"): 2,
    }
    # The oldest approval still before its deadline (not the older lapsed one).
    assert found.oldest_approval_at == old


async def test_a_client_call_counts_only_within_the_client_window(store: SessionStore) -> None:
    """A row last written before the window holds no client call of a tool whose deadline is
    within it; a tool with a longer deadline than the window is missed (the runtime passes its
    tools' longest)."""
    await parked(store, "long", call("c1", "device", "client", deadline=now_ms() + 86_400_000))
    hour_ago = sa.text("UPDATE __agents_states SET updated_at = :at WHERE session_id = 'long'")
    async with store.transaction() as conn:
        at = datetime.fromtimestamp((now_ms() - 3_600_000) / 1000, UTC)
        await conn.execute(hour_ago.bindparams(sa.bindparam("at", at, type_=sa.DateTime(True))))
    assert by_tool(await pending_figures(store, client_window_ms=WINDOW_MS)) == {}
    assert (await pending_figures(store, client_window_ms=WINDOW_MS)).oldest_approval_at is None
    day = 86_400_000
    assert by_tool(await pending_figures(store, client_window_ms=day)) == {("client", "device"): 1}


@pytest.mark.postgres_only
async def test_on_postgres_the_figures_read_indexes_only(migrated_pg_url: str) -> None:
    """The approvals' count reads the counts' table (a few rows), the lapsed ones come from
    the deadline index, the oldest from the age index; the client calls from the rows the
    updated_at index finds: no scan of the inbox or of the sessions."""
    since = "now() - interval '6 minutes'"
    approvals = figures_module._APPROVALS.format(lapsed_from=Postgres.lapsed_approvals_from)
    statement = f"{approvals} UNION ALL {Postgres.client_calls}".replace(":since", since).replace(
        ":now", "0"
    )
    with psycopg.connect(migrated_pg_url) as conn:
        for setting in Postgres.figures_plan:
            conn.execute(setting)
        plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {statement}").fetchall())
    assert "ix___agents_approvals_tool" not in plan, plan
    assert "pk___agents_approval_counts" in plan, plan
    assert "ix___agents_states_updated_at" in plan, plan
    assert "ix___agents_approvals_deadline" in plan, plan
    assert "ix___agents_approvals_oldest" in plan, plan
    assert "Seq Scan" not in plan, plan


def test_on_sqlite_the_figures_read_indexes_only(migrated_sqlite_url: str) -> None:
    """The same on SQLite: the counts' table, the deadline index it is told to take, the age
    index, and the updated_at index; neither the inbox nor the sessions is scanned."""
    approvals = figures_module._APPROVALS.format(lapsed_from=SQLite.lapsed_approvals_from)
    statement = f"{approvals} UNION ALL {SQLite.client_calls}"
    with sqlite3.connect(migrated_sqlite_url.removeprefix("sqlite:///")) as conn:
        rows = conn.execute(f"EXPLAIN QUERY PLAN {statement}", {"now": 0, "since": ""})
        plan = "\n".join(str(row[3]) for row in rows)
    assert "ix___agents_approvals_tool" not in plan, plan
    assert "USING INDEX ix___agents_approvals_deadline" in plan, plan
    assert "USING INDEX ix___agents_approvals_oldest" in plan, plan
    assert "USING INDEX ix___agents_states_updated_at" in plan, plan
    scans = [line for line in plan.splitlines() if line.startswith("SCAN __agents")]
    # The only tables walked whole are the counts' (a few rows), for the sums and the slots.
    assert scans and all(line.startswith("SCAN __agents_approval_counts") for line in scans)
