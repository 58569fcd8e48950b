"""The runbook's SQL runs against our tables and means what it says, on seeded rows.

The statements are read from docs/runbook.md itself (``tests/runbook_sql.py``), never copied,
so a changed runbook is what runs here: the ownership map, the duplicate tool-result check and
the usage aggregations, with exact expected numbers. Only the placeholders are replaced by real
ids. The rows they read are written through the store, the way the runtime writes them.
(``tests/observability/test_runbook.py`` runs every statement on real turns.)
"""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from helix_dbos.core.messages import Message, ToolCall
from helix_dbos.core.session import SessionState
from helix_dbos.store.store import SessionStore
from tests.conftest import drop_pg_database
from tests.runbook_sql import runbook_sql
from tests.store.conftest import clone_pg_database
from tests.store.store_builders import now_ms, pending_call, session

# -- the runbook, read from docs/runbook.md ----------------------------------------------------


def statement(name: str, lang: str = "sql") -> str:
    """The runbook's statement ``name`` (in the language its fence declares)."""
    found_lang, sql = runbook_sql()[name]
    assert found_lang == lang, (name, found_lang)
    return sql


OWNERSHIP = statement("ownership-map")
FIND_DUPLICATE_TOOL_RESULTS = statement("duplicate-tool-results")
TIMEOUT_RATE = statement("timeout-rate")
WAIT_PERCENTILES = statement("wait-percentiles")
AVERAGE_WAIT_SQLITE = statement("sqlite-average-wait", "sqlite")


def fill(sql: str, **values: str) -> str:
    """Replace the runbook's placeholders (which must be there) by real ids."""
    for placeholder, value in values.items():
        assert placeholder in sql, placeholder
        sql = sql.replace(placeholder, value)
    return sql


# -- the rows -------------------------------------------------------------------------------

MINUTE_MS = 60_000

#: Waits (ms) in the last hour, per tool. Their counts make ROUND(..., 2) round both ways.
RECENT_WAITS: dict[str, list[float]] = {
    "confirm_dialog": [1_200.0, 300_000.0, 4_700.0],
    "pick_file": [300_000.0, 95.0, 300_000.0],
    "geo_locate": [12.0, 48.0, 31.0, 7.0, 1_000.0, 250.0, 64.0],
    "sign_document": [5_000.0, 7_500.0, 2_500.0, 10_000.0, 12_500.0, 15_000.0],
}
#: Timeout counters (``data.value`` is 1) in the last hour, per tool.
RECENT_TIMEOUTS = {"confirm_dialog": 1, "pick_file": 2, "only_timeouts": 1}
#: Rows older than an hour: they would change every answer if they were counted.
OLD_WAITS: dict[str, list[float]] = {
    "geo_locate": [9_999_999.0, 8_888_888.0],
    "confirm_dialog": [1.0],
    "stale_tool": [42.0],
}
OLD_TIMEOUTS = {"geo_locate": 3, "sign_document": 1}


def percentile_cont(values: list[float], fraction: float) -> float:
    """Postgres' ``percentile_cont``: linear interpolation between the nearest ranks."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def timeout_pct(timed_out: int, total: int) -> Decimal:
    """``ROUND(100.0 * timed_out / total, 2)``: numeric rounding, half away from zero."""
    return (Decimal(100) * timed_out / Decimal(total)).quantize(
        Decimal("0.01"), rounding=ROUND_HALF_UP
    )


@dataclass
class Seeded:
    """What was written, to compare the runbook's answers with."""

    root: SessionState
    child: SessionState
    root_call: str
    child_call: str
    usage_rows: list[dict[str, Any]] = field(default_factory=list)


def usage_rows() -> list[dict[str, Any]]:
    """Wait and timeout rows, as the runtime records them at resolve time."""
    now = now_ms()
    rows: list[dict[str, Any]] = []

    def add(source_type: str, tool: str, value: float, timestamp: int) -> None:
        rows.append(
            {
                "kind": "custom",
                "source_type": source_type,
                "source_name": tool,
                "data": {"value": value},
                "timestamp": timestamp,
                "session_id": "usage-session",
                "dedupe_key": f"{source_type}:{tool}:{len(rows)}",
            }
        )

    for tool, waits in RECENT_WAITS.items():
        for i, ms in enumerate(waits):
            add("client_tool_wait_ms", tool, ms, now - (i + 1) * MINUTE_MS)
    for tool, count in RECENT_TIMEOUTS.items():
        for i in range(count):
            add("client_tool_timeout", tool, 1, now - (20 + i) * MINUTE_MS)
    for tool, waits in OLD_WAITS.items():
        for i, ms in enumerate(waits):
            add("client_tool_wait_ms", tool, ms, now - (61 + 30 * i) * MINUTE_MS - 5_000)
    for tool, count in OLD_TIMEOUTS.items():
        for i in range(count):
            add("client_tool_timeout", tool, 1, now - (70 + i) * MINUTE_MS)
    # Rows of other kinds share the table and are never counted as waits.
    rows.append(
        {
            "kind": "tokens",
            "source_type": "llm_tokens",
            "source_name": "scripted",
            "data": {"value": 1234},
            "timestamp": now,
        }
    )
    return rows


async def seed(store: SessionStore) -> Seeded:
    """A root session with a sub-agent; each owns one pending client call; usage rows."""
    tag = uuid.uuid4().hex[:8]
    root_id, child_id = f"root-{tag}", f"child-{tag}"
    root_call, child_call = f"call_root_{tag}", f"call_child_{tag}"
    await store.create_session(session(root_id, status="running", run_id="run-1"))
    await store.create_session(session(child_id, root=root_id, status="running", run_id="run-c"))

    def register(states: dict[str, SessionState]) -> None:
        # As the runtime does: pending under the owner, ownership on the root, one CAS write.
        states[root_id].pending[root_call] = pending_call(root_call, "confirm_dialog", "run-1")
        states[child_id].pending[child_call] = pending_call(child_call, "pick_file", "run-c")
        states[root_id].ownership[root_call] = root_id
        states[root_id].ownership[child_call] = child_id
        states[root_id].status = states[child_id].status = "suspended_client_tool"

    saved, _ = await store.update([root_id, child_id], register)
    for sid, call, tool in (
        (root_id, root_call, "confirm_dialog"),
        (child_id, child_call, "pick_file"),
    ):
        await store.append_messages(
            sid,
            "run-x",
            [
                Message(role="user", content="go"),
                Message(role="assistant", tool_calls=[ToolCall(id=call, name=tool)]),
                # The answer landed, but the pending entry was never cleared: the runbook's case.
                Message(role="tool", tool_call_id=call, tool_name=tool, result={"ok": True}),
            ],
        )
    rows = usage_rows()
    await store.record_usage(rows)
    return Seeded(saved[root_id], saved[child_id], root_call, child_call, rows)


@pytest.fixture
async def pg_seeded(pg_store: SessionStore) -> AsyncIterator[Seeded]:
    """The runbook's world on a fresh Postgres database, for the tests that change it."""
    yield await seed(pg_store)


@dataclass
class World:
    """A seeded database shared by the tests that only read."""

    url: str
    seeded: Seeded


@pytest.fixture(scope="module")
def pg_world(pg_template: str) -> Iterator[World]:
    """The runbook's world on Postgres, written once for the read-only tests of this module."""
    url = clone_pg_database(pg_template)

    async def build() -> Seeded:
        store = SessionStore.from_url(url)
        try:
            return await seed(store)
        finally:
            await store.close()

    try:
        yield World(url, asyncio.run(build()))
    finally:
        drop_pg_database(url)


def stored_state(url: str, session_id: str) -> SessionState:
    """The session as the store reads it."""

    async def read() -> SessionState:
        store = SessionStore.from_url(url)
        try:
            return await store.get(session_id)
        finally:
            await store.close()

    return asyncio.run(read())


@pytest.fixture
async def sqlite_store(migrated_sqlite_url: str) -> AsyncIterator[SessionStore]:
    """A store on a migrated SQLite file."""
    s = SessionStore.from_url(migrated_sqlite_url)
    try:
        yield s
    finally:
        await s.close()


def pg_query(url: str, sql: str) -> list[tuple[Any, ...]]:
    """Run one statement with psycopg and return its rows."""
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def sqlite_query(url: str, sql: str) -> list[tuple[Any, ...]]:
    """Run one statement with the sqlite3 module and return its rows."""
    conn = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


# -- Inspecting the ownership map -----------------------------------------------------------


def test_ownership_query_returns_the_maps(pg_world: World) -> None:
    """The ownership SELECT shows the root's routing table and its own pending calls as JSON."""
    s, migrated_pg_url = pg_world.seeded, pg_world.url
    rows = pg_query(migrated_pg_url, fill(OWNERSHIP, **{"your-root-session-id": s.root.session_id}))
    assert len(rows) == 1
    session_id, ownership, pending = rows[0]
    assert session_id == s.root.session_id
    assert ownership == {s.root_call: s.root.session_id, s.child_call: s.child.session_id}
    assert set(pending) == {s.root_call}
    assert pending[s.root_call] == s.root.pending[s.root_call].dump()
    assert pending[s.root_call]["toolCallId"] == s.root_call  # camelCase, as the runbook shows
    assert pending[s.root_call]["toolName"] == "confirm_dialog"
    # The child's call is pending under the child (the owner), not the root.
    rows = pg_query(
        migrated_pg_url, fill(OWNERSHIP, **{"your-root-session-id": s.child.session_id})
    )
    assert rows == [(s.child.session_id, {}, {s.child_call: s.child.pending[s.child_call].dump()})]
    # The map the store reads back is the one the runbook shows.
    assert stored_state(migrated_pg_url, s.root.session_id).ownership == ownership


async def test_ownership_query_on_sqlite(
    sqlite_store: SessionStore, migrated_sqlite_url: str
) -> None:
    """The runbook's D1 ownership query reads the embedded SQLite backend the same way."""
    s = await seed(sqlite_store)
    sql = fill(OWNERSHIP, **{"your-root-session-id": s.root.session_id})
    [(session_id, ownership, pending)] = sqlite_query(migrated_sqlite_url, sql)
    assert session_id == s.root.session_id
    assert json.loads(ownership) == {
        s.root_call: s.root.session_id,
        s.child_call: s.child.session_id,
    }
    assert json.loads(pending) == {s.root_call: s.root.pending[s.root_call].dump()}


def test_ownership_query_for_unknown_session_is_empty(pg_world: World) -> None:
    """A root id that does not exist returns no row (the submit_unknown root_state_not_found case)."""
    sql = fill(OWNERSHIP, **{"your-root-session-id": "no-such-session"})
    assert pg_query(pg_world.url, sql) == []


# -- Duplicate tool results -----------------------------------------------------------------


async def test_duplicate_query_finds_nothing(
    pg_store: SessionStore, pg_seeded: Seeded, migrated_pg_url: str
) -> None:
    """Duplicates cannot be written, so the runbook's duplicate query returns no row."""
    s = pg_seeded
    with pytest.raises(sa.exc.IntegrityError):
        await pg_store.append_messages(
            s.root.session_id,
            "run-2",
            [Message(role="tool", tool_call_id=s.root_call, tool_name="confirm_dialog", result=2)],
        )
    assert pg_query(migrated_pg_url, FIND_DUPLICATE_TOOL_RESULTS) == []


async def test_duplicate_query_on_sqlite(
    sqlite_store: SessionStore, migrated_sqlite_url: str
) -> None:
    """The duplicate query is portable SQL: it runs on SQLite too and finds nothing."""
    s = await seed(sqlite_store)
    with pytest.raises(sa.exc.IntegrityError):
        await sqlite_store.append_messages(
            s.child.session_id,
            None,
            [Message(role="tool", tool_call_id=s.child_call, tool_name="pick_file", result=2)],
        )
    assert sqlite_query(migrated_sqlite_url, FIND_DUPLICATE_TOOL_RESULTS) == []


async def test_duplicate_query_finds_a_duplicate_when_the_index_is_missing(
    pg_seeded: Seeded, migrated_pg_url: str
) -> None:
    """Were a duplicate ever written (index dropped, in a rolled-back transaction), the
    runbook's query finds it: it is not a query that can only answer "none"."""
    s = pg_seeded
    with psycopg.connect(migrated_pg_url) as conn:
        conn.execute("DROP INDEX uq___agents_messages_tool_result")
        for _ in range(2):
            conn.execute(
                "INSERT INTO __agents_messages (session_id, role, tool_call_id, content, created_at)"
                " VALUES (%s, 'tool', %s, '{}'::jsonb, now())",
                (s.root.session_id, s.root_call),
            )
        assert conn.execute(FIND_DUPLICATE_TOOL_RESULTS).fetchall() == [
            (s.root.session_id, s.root_call, 3)
        ]
        conn.rollback()
    # The rollback restored the index: duplicates are impossible again.
    with psycopg.connect(migrated_pg_url) as conn:
        indexes = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = '__agents_messages'"
        ).fetchall()
    assert ("uq___agents_messages_tool_result",) in indexes


# -- Usage aggregations ---------------------------------------------------------------------


def test_timeout_rate_per_tool(pg_world: World) -> None:
    """timeout_pct is timeouts / waits of the last hour per tool, rounded to 2 places."""
    rows = pg_query(pg_world.url, TIMEOUT_RATE)
    expected = {
        tool: (
            len(waits),
            RECENT_TIMEOUTS.get(tool, 0),
            timeout_pct(RECENT_TIMEOUTS.get(tool, 0), len(waits)),
        )
        for tool, waits in RECENT_WAITS.items()
    }
    assert {r[0]: tuple(r[1:]) for r in rows} == expected
    assert len(rows) == len(expected)  # a tool with timeouts but no waits has no rate
    # The numbers themselves, rounded both ways.
    assert expected["confirm_dialog"][2] == Decimal("33.33")
    assert expected["pick_file"][2] == Decimal("66.67")
    assert expected["geo_locate"][2] == Decimal("0.00")
    pcts = [r[3] for r in rows]
    assert pcts == sorted(pcts, reverse=True)


def test_wait_percentiles_per_tool(pg_world: World) -> None:
    """p50/p95 equal percentile_cont computed over the last hour's waits of each tool."""
    rows = pg_query(pg_world.url, WAIT_PERCENTILES)
    expected = [
        (tool, percentile_cont(waits, 0.5), percentile_cont(waits, 0.95), len(waits))
        for tool, waits in RECENT_WAITS.items()
    ]
    expected.sort(key=lambda r: r[2], reverse=True)
    assert [r[0] for r in rows] == [e[0] for e in expected]
    for got, want in zip(rows, expected, strict=True):
        assert got[1] == pytest.approx(want[1], rel=1e-12)
        assert got[2] == pytest.approx(want[2], rel=1e-12)
        assert got[3] == want[3]
    # Interpolation really happens (p95 of 7 waits lies between the two largest).
    geo = next(r for r in rows if r[0] == "geo_locate")
    assert 250.0 < geo[2] < 1_000.0
    assert geo[1] == 48.0


def test_old_rows_are_excluded(pg_world: World) -> None:
    """Rows older than an hour are in the table but in no answer."""
    migrated_pg_url = pg_world.url
    with psycopg.connect(migrated_pg_url) as conn:
        stored = conn.execute(
            "SELECT source_type, source_name, COUNT(*) FROM __agents_usage"
            " WHERE kind = 'custom' GROUP BY 1, 2"
        ).fetchall()
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for source_type, tool, n in stored:
        counts[(source_type, tool)] = n
    assert counts[("client_tool_wait_ms", "geo_locate")] == 9  # 7 recent + 2 old
    assert counts[("client_tool_wait_ms", "stale_tool")] == 1
    tools = {r[0] for r in pg_query(migrated_pg_url, WAIT_PERCENTILES)}
    assert "stale_tool" not in tools
    assert {r[0] for r in pg_query(migrated_pg_url, TIMEOUT_RATE)} == set(RECENT_WAITS)


async def test_average_wait_on_sqlite(sqlite_store: SessionStore, migrated_sqlite_url: str) -> None:
    """The runbook's D1 aggregation runs on the embedded SQLite backend and excludes old rows."""
    await seed(sqlite_store)
    rows = sqlite_query(migrated_sqlite_url, AVERAGE_WAIT_SQLITE)
    expected = {tool: (sum(w) / len(w), len(w)) for tool, w in RECENT_WAITS.items()}
    assert {r[0] for r in rows} == set(expected)
    for tool, avg_ms, count in rows:
        assert avg_ms == pytest.approx(expected[tool][0])
        assert count == expected[tool][1]
    averages = [r[1] for r in rows]
    assert averages == sorted(averages, reverse=True)


async def test_usage_rows_written_once(
    pg_store: SessionStore, pg_seeded: Seeded, migrated_pg_url: str
) -> None:
    """Recording the same rows again (a replayed step) adds nothing: the answers are unchanged."""
    before = pg_query(migrated_pg_url, TIMEOUT_RATE)
    await pg_store.record_usage(pg_seeded.usage_rows[:-1])  # the keyed rows
    assert pg_query(migrated_pg_url, TIMEOUT_RATE) == before
