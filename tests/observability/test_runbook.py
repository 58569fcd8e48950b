"""docs/runbook.md: every SQL statement in it runs against real turns, with checked numbers.

The statements are read from the markdown file itself (each ``sql`` / ``sqlite`` block is
named by the ``<!-- sql: name -->`` comment above it), so the runbook and this test cannot
drift apart: a new block without a check here fails, and so does a check without a block.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from helix_dbos.core.clock import now_ms
from helix_dbos.http.app import create_app
from helix_dbos.runtime import AgentRuntime, Operator, names
from helix_dbos.runtime._hibernated.keeper import keep_once
from helix_dbos.testing import capture_log_events
from tests.observability.obs_agents import make_agents
from tests.observability.obs_helpers import (
    APP_VERSION,
    EXECUTOR_ID,
    FlakySaves,
    one_event,
    populate,
    settings_for,
)
from tests.runbook_sql import runbook_sql
from tests.runtime.hibernation_worker import hibernated

#: Client deadlines: FAST lapses, but only after the test has seen its call pending.
TIMEOUT, FAST = 30.0, 2.0
#: The statements on hibernated turns, run by their own test (its turns hibernate at once).
HIBERNATION = {"hibernated-sessions", "hibernated-due"}
#: Run on real companions by tests/runtime/test_companion_lifecycle.py.
COMPANIONS = {"companions"}
#: Run before and after a retention sweep by tests/runtime/test_retention.py.
SIZES = {"table-sizes", "oldest-rows"}
#: Run on real decisions by tests/runtime/test_approval_policies.py.
DECISIONS = {"decisions-this-month"}


def _percentile(values: list[float], q: float) -> float:
    # Postgres's percentile_cont: linear interpolation between the closest ranks.
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class Runbook:
    """Runs the runbook's statements by name, with their placeholders filled in."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.blocks = runbook_sql()
        self.ran: set[str] = set()

    def run(self, name: str, **placeholders: str) -> list[tuple[Any, ...]]:
        lang, sql = self.blocks[name]
        assert lang == "sql"
        for placeholder, value in placeholders.items():
            assert f"'{placeholder}'" in sql, (name, placeholder)
            sql = sql.replace(f"'{placeholder}'", f"'{value}'")
        self.ran.add(name)
        with psycopg.connect(self.url) as conn:
            cur = conn.execute(sql)
            if cur.description is None:
                return [(cur.rowcount,)]
            return list(cur.fetchall())


@pytest.mark.postgres_only
async def test_every_runbook_statement_on_real_turns(
    launch: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = await launch(timeout=TIMEOUT, fast_timeout=FAST)

    # A session whose answered call could not be settled: the drain's clear loses every
    # compare-and-swap attempt and the turn fails. The failure clears the entry; a release
    # before 0.2 left it stranded, which the runbook's statements find and clear: put it back
    # as that release left it.
    flaky = FlakySaves(monkeypatch)
    stranded = await runtime.start("ops", "pick_color")
    (stranded_call,) = await runtime.wait_for_pending(stranded.session_id)
    await runtime.submit_tool_result(
        stranded.session_id, stranded_call["toolCallId"], result={"color": "red"}
    )
    answered = await runtime.session(stranded.session_id)
    flaky.arm(5)
    assert (await runtime.wait(stranded.session_id))["status"] == "failed"
    assert flaky.raised == 5
    failed = await runtime.session(stranded.session_id)
    assert failed.pending == {} and failed.ownership == {}
    failed.pending, failed.ownership = answered.pending, answered.ownership
    failed.completed = {}
    await runtime.store.save(failed)

    data = await populate(runtime, timeout=TIMEOUT, fast_timeout=FAST)
    # Still parked while the statements run: one on its own, one in a sub-agent.
    parked = await runtime.start("ops", "pick_color")
    (parked_call,) = await runtime.wait_for_pending(parked.session_id)
    tree = await runtime.start("lead", "delegate:confirm")
    (child_call,) = await runtime.wait_for_pending(tree.session_id)
    child = child_call["ownerSessionId"]

    book = Runbook(pg_url)
    waits: dict[str, list[float]] = {}
    for call in data.calls:
        with psycopg.connect(pg_url) as conn:
            row = conn.execute(
                "SELECT (data->>'value')::float FROM __agents_usage WHERE source_type ="
                " 'client_tool_wait_ms' AND data->>'toolCallId' = %s",
                (call.tool_call_id,),
            ).fetchone()
        assert row is not None
        waits.setdefault(call.tool_name, []).append(row[0])
    assert sorted(len(v) for v in waits.values()) == [2, 2]

    # -- metrics ---------------------------------------------------------------------------
    percentiles = book.run("wait-percentiles")
    assert [(r[0], r[3]) for r in percentiles] == sorted(
        [(t, 2) for t in waits], key=lambda tc: -_percentile(waits[tc[0]], 0.95)
    )
    for tool, p50, p95, _ in percentiles:
        assert p50 == pytest.approx(_percentile(waits[tool], 0.5))
        assert p95 == pytest.approx(_percentile(waits[tool], 0.95))
    assert FAST * 1000 in waits["pick_color"]

    assert book.run("timeout-rate") == [
        ("pick_color", 2, 1, Decimal("50.00")),
        ("confirm", 2, 0, Decimal("0.00")),
    ]
    assert book.run("outcome-counters") == [
        ("confirm", "client_tool_abort", 1),
        ("pick_color", "client_tool_timeout", 1),
    ]
    tokens = {r[0]: r[1:] for r in book.run("tokens-per-agent")}
    # ops: answered 3 + aborted 1 + parked 1 + the sub-agent 1 + stranded 1; ops_fast: 2.
    assert {agent: (calls, inputs) for agent, (calls, inputs, _) in tokens.items()} == {
        "lead": (1, 10),
        "ops": (7, 70),
        "ops_fast": (2, 20),
    }

    # -- a timeout: the turn's workflow --------------------------------------------------
    (row,) = book.run("turn-workflow", **{"your-root-session-id": parked.session_id})
    assert row[0] == parked.session_id and row[1] == "suspended_client_tool"
    assert row[2] == parked.workflow_id and row[3] == "PENDING"
    assert (row[4], row[5]) == (EXECUTOR_ID, APP_VERSION)
    statuses = {
        name: book.run("turn-workflow", **{"your-root-session-id": sid})[0][3]
        for name, sid in data.sessions.items()
    }
    assert statuses == {"answered": "SUCCESS", "timeout": "SUCCESS", "aborted": "CANCELLED"}

    # -- the ownership map ---------------------------------------------------------------
    ((sid, ownership, pending),) = book.run(
        "ownership-map", **{"your-root-session-id": parked.session_id}
    )
    tcid = parked_call["toolCallId"]
    assert (sid, ownership) == (parked.session_id, {tcid: parked.session_id})
    assert pending[tcid]["toolName"] == "pick_color"
    assert pending[tcid]["deadlineAt"] == parked_call["deadlineAt"]
    assert pending[tcid]["deadlineAt"] - pending[tcid]["registeredAt"] == 30_000
    assert "submittedAt" not in pending[tcid]
    # A sub-agent's call: routed on the root, pending on the child.
    ((_, ownership, pending),) = book.run(
        "ownership-map", **{"your-root-session-id": tree.session_id}
    )
    assert ownership == {child_call["toolCallId"]: child} and pending == {}

    ((_, stones),) = book.run("tombstones", **{"your-root-session-id": data.sessions["answered"]})
    assert sorted(s["outcome"] for s in stones.values()) == ["answered", "answered"]
    assert {c.tool_call_id for c in data.by("answered")} == set(stones)

    pending_rows = book.run("pending-calls")
    assert [(r[0], r[2], r[3], r[4], r[6]) for r in pending_rows] == [
        (stranded.session_id, "failed", stranded_call["toolCallId"], "pick_color", True),
        (parked.session_id, "suspended_client_tool", tcid, "pick_color", False),
        (child, "suspended_client_tool", child_call["toolCallId"], "confirm", False),
    ]
    assert pending_rows[2][1] == tree.session_id

    # -- stranded entries and their cleanup ----------------------------------------------
    assert book.run("stranded-calls") == [
        (stranded.session_id, "failed", stranded_call["toolCallId"])
    ]
    before = await runtime.session(stranded.session_id)
    assert book.run("clear-stranded-ownership", YOUR_SESSION=stranded.session_id) == [(1,)]
    assert book.run("clear-stranded-pending", YOUR_SESSION=stranded.session_id) == [(1,)]
    assert book.run("stranded-calls") == []
    after = await runtime.session(stranded.session_id)
    assert (after.pending, after.ownership, after.version) == ({}, {}, before.version + 2)
    # A parked session is never touched by the cleanup.
    assert book.run("clear-stranded-pending", YOUR_SESSION=parked.session_id) == [(0,)]

    # -- duplicates cannot exist -----------------------------------------------------------
    ((name, definition),) = book.run("unique-index")
    assert name == "uq___agents_messages_tool_result"
    assert "CREATE UNIQUE INDEX" in definition and "WHERE (role = 'tool'::text)" in definition
    assert book.run("duplicate-tool-results") == []
    answered_call = data.by("answered")[0]
    with pytest.raises(psycopg.errors.UniqueViolation), psycopg.connect(pg_url) as conn:
        conn.execute(
            "INSERT INTO __agents_messages (session_id, role, tool_call_id, content, created_at)"
            " VALUES (%s, 'tool', %s, '{}'::jsonb, now())",
            (answered_call.session_id, answered_call.tool_call_id),
        )

    # -- the approval inbox (with approvals: tests/store/test_approval_inbox.py) -----------
    # Only client calls wait here, and the inbox lists approvals alone.
    assert book.run("approval-inbox") == []
    assert book.run("approval-inbox-tenant", **{"your-tenant": "acme"}) == []

    sql_blocks = {n for n, (lang, _) in book.blocks.items() if lang == "sql"}
    assert book.ran | HIBERNATION | COMPANIONS | SIZES | DECISIONS == sql_blocks
    await runtime.interrupt(parked.session_id)
    await runtime.interrupt(tree.session_id)


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


@pytest.mark.postgres_only
async def test_hibernated_turn_statements(launch: Any, pg_url: str) -> None:
    """Turns hibernated for real, the deadline keeper off (so a due batch stays due): one
    waits on a deadline 30 s away, one on a lapsed deadline, one on a batch an operator's
    ``fail-call`` completed (no agents there: nothing started its continuation)."""
    # ``ops_fast``'s call lapses after 3 s: its turn must hibernate first, on a slow machine too.
    runtime = await launch(
        timeout=TIMEOUT, fast_timeout=3.0, hibernate_after_seconds=0, deadline_keeper_seconds=0
    )
    waiting = await runtime.start("ops", "pick_color")
    lapsed = await runtime.start("ops_fast", "pick_color")
    answered = await runtime.start("ops", "confirm")
    marks = {
        h.session_id: await hibernated(runtime, h.session_id) for h in (waiting, lapsed, answered)
    }
    (call,) = (await runtime.session(answered.session_id)).pending
    async with Operator.open(pg_url) as operator:
        _, answer = await operator.fail_call(answered.session_id, call)
    assert answer.continuation is not None and answer.continuation.kind == "new_run"
    lapsed_due = (await runtime.session(lapsed.session_id)).metadata["hibernated"]["dueAt"]
    while now_ms() <= lapsed_due:
        await asyncio.sleep(0.05)

    book = Runbook(pg_url)
    rows = book.run("hibernated-sessions")
    assert [r[0] for r in rows] == sorted(marks, key=lambda sid: (marks[sid]["at"], sid))
    for sid, agent, run_id, since, due, child, continuation in rows:
        state = await runtime.session(sid)
        assert (agent, run_id) == (state.agent_type, state.run_id)
        assert child is None  # none waits on a sub-agent
        assert since == _at(marks[sid]["at"])
        assert continuation == names.continuation_workflow_id(sid, state.run_id or "")
        if sid == answered.session_id:
            assert due is None  # due at once
        else:
            assert due == _at(marks[sid]["dueAt"])
            (pending,) = state.pending.values()
            assert marks[sid]["dueAt"] == pending.deadline_at

    due_rows = book.run("hibernated-due")
    assert [r[0] for r in due_rows] == [answered.session_id, lapsed.session_id]
    assert due_rows[0][3:] == (None, None)
    assert due_rows[1][3] == _at(lapsed_due) and due_rows[1][4].total_seconds() > 0
    # The keeper's index serves it, bounded by the due time (not a scan of the whole index
    # with a filter); the table is tiny, so forbid the scan the planner would prefer.
    with psycopg.connect(pg_url) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + book.blocks["hibernated-due"][1]))
    assert "ix___agents_states_hibernated_due" in plan, plan
    assert "Index Cond" in plan, plan

    # The keeper continues the due two; the one still waiting stays listed, and not due.
    assert await keep_once(runtime.ctx) == 2
    for handle in (answered, lapsed):
        assert (await runtime.wait(handle.session_id, timeout=30))["status"] == "completed"
    assert [r[0] for r in book.run("hibernated-sessions")] == [waiting.session_id]
    assert book.run("hibernated-due") == []
    assert book.ran == HIBERNATION
    await runtime.interrupt(waiting.session_id)
    assert book.run("hibernated-sessions") == []


async def test_sqlite_statement_on_real_turns(tmp_path: Path) -> None:
    lang, sql = runbook_sql()["sqlite-average-wait"]
    assert lang == "sqlite"
    path = tmp_path / "helix.sqlite"
    runtime = AgentRuntime(
        make_agents(fast_timeout=FAST), settings_for(f"sqlite:///{path}", sqlite_poll_seconds=0.02)
    )
    await runtime.launch()
    try:
        answered = await runtime.start("ops", "pick_color")
        (call,) = await runtime.wait_for_pending(answered.session_id)
        await runtime.submit_tool_result(
            answered.session_id, call["toolCallId"], result={"color": "red"}
        )
        await runtime.wait(answered.session_id)
        late = await runtime.start("ops_fast", "pick_color")
        await runtime.wait_for_pending(late.session_id)
        await runtime.wait(late.session_id)
    finally:
        await runtime.shutdown()
    with sqlite3.connect(path) as conn:
        rows = conn.execute(sql).fetchall()
        values = [
            v
            for (v,) in conn.execute(
                "SELECT json_extract(data, '$.value') FROM __agents_usage"
                " WHERE source_type = 'client_tool_wait_ms'"
            )
        ]
    assert FAST * 1000 in values and len(values) == 2
    assert rows == [("pick_color", pytest.approx(sum(values) / 2), 2)]


@pytest.mark.postgres_only
async def test_force_failing_a_stuck_call_from_python_and_over_http(launch: Any) -> None:
    runtime = await launch()
    app = create_app(runtime, allow_unauthenticated=True)
    transport = httpx.ASGITransport(app=app)
    stuck = [await runtime.start("ops", "pick_color") for _ in range(2)]
    calls = [(await runtime.wait_for_pending(h.session_id))[0] for h in stuck]

    with capture_log_events() as events:
        answer = await runtime.submit_tool_result(
            stuck[0].session_id, calls[0]["toolCallId"], error="manually_failed_by_operator"
        )
        async with httpx.AsyncClient(transport=transport, base_url="http://helix") as client:
            response = await client.post(
                "/submit-tool-result",
                json={
                    "sessionId": stuck[1].session_id,
                    "toolCallId": calls[1]["toolCallId"],
                    "error": "manually_failed_by_operator",
                },
            )
        views = [await runtime.wait(h.session_id) for h in stuck]
    assert answer.status == "accepted"
    assert response.status_code == 200 and response.json()["status"] == "accepted"
    for handle, call, view in zip(stuck, calls, views, strict=True):
        assert view["status"] == "completed"
        (tool,) = [m for m in await runtime.messages(handle.session_id) if m.role == "tool"]
        assert (tool.is_error, tool.content) == (True, "manually_failed_by_operator")
        submitted = one_event(events, "client_tool.submitted", toolCallId=call["toolCallId"])
        assert submitted["hasError"] is True
