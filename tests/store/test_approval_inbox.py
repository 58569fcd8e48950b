"""The approval inbox's table, on both backends: the triggers of revision 0008 keep one row per
answerable approval, whatever writes the session row; the listing pages through it oldest
first with a cursor; on Postgres the inbox's queries (the store's and the runbook's) are served
by its indexes.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from helix_dbos.core.session import PendingCall, SessionState
from helix_dbos.errors import RequestValidationError
from helix_dbos.store.approvals import (
    ApprovalQuery,
    decode_cursor,
    encode_cursor,
    inbox_statement,
    list_approvals,
)
from helix_dbos.store.store import SessionStore
from tests.runbook_sql import runbook_sql

from .store_builders import now_ms, session

HOUR_MS = 3_600_000


def approval(
    tool_call_id: str, run_id: str, *, tool: str = "transfer", registered: int, ttl: int = HOUR_MS
) -> PendingCall:
    """An approval call as the runtime parks it."""
    return PendingCall(
        tool_call_id=tool_call_id,
        tool_name=tool,
        input={"amount": 5, "call": tool_call_id},
        run_id=run_id,
        kind="approval",
        index=0,
        deadline_at=registered + ttl,
        registered_at=registered,
        completed_retention_ms=0,
        approval_id=f"{run_id}::{tool_call_id}",
        args_digest="digest-" + tool_call_id,
    )


async def park(store: SessionStore, state: SessionState, *calls: PendingCall) -> SessionState:
    """Put ``calls`` in the session's map and suspend it, as a park commits it."""

    def mutate(states: dict[str, SessionState]) -> None:
        s = states[state.session_id]
        s.status = "suspended_client_tool"
        for call in calls:
            s.pending[call.tool_call_id] = call
            s.ownership[call.tool_call_id] = s.session_id

    saved, _ = await store.update([state.session_id], mutate)
    return saved[state.session_id]


async def change(store: SessionStore, sid: str, how: Any) -> None:
    """One compare-and-swap of the row, as every runtime transition writes it."""
    await store.update([sid], lambda states: how(states[sid]))


async def inbox(store: SessionStore, **filters: Any) -> list[tuple[str, str]]:
    page = await list_approvals(store, ApprovalQuery(**filters), now_ms())
    return [(a.session_id, a.tool_call_id) for a in page.approvals]


async def test_every_end_of_a_pending_approval_takes_it_out_of_the_inbox(
    store: SessionStore,
) -> None:
    """Parked: listed, with the owner and the call's fields. Then each way a call ends (its
    answer stored, its entry removed by a timeout or an abandon, a stop, a new run, the row
    deleted) takes it out in the same write; a client call is never listed."""
    t0 = now_ms() - 60_000
    ids = ["answered", "expired", "stopped", "rerun", "deleted", "kept"]
    for i, sid in enumerate(ids):
        await store.create_session(
            session(sid, status="running", run_id=f"run-{sid}", principal="ada", tenant="acme")
        )
        await park(
            store, await store.get(sid), approval(f"call-{sid}", f"run-{sid}", registered=t0 + i)
        )
    client = await store.create_session(session("client", status="running", run_id="run-c"))
    client_call = approval("call-client", "run-c", registered=t0).model_copy(
        update={"kind": "client", "approval_id": None}
    )
    await park(store, client, client_call)

    page = await list_approvals(store, ApprovalQuery(), now_ms())
    assert [a.session_id for a in page.approvals] == ids
    first = page.approvals[0]
    assert first.dump() | {"ageMs": 0} == {
        "approvalId": "run-answered::call-answered",
        "toolCallId": "call-answered",
        "toolName": "transfer",
        "input": {"amount": 5, "call": "call-answered"},
        "argsDigest": "digest-call-answered",
        "sessionId": "answered",
        "rootSessionId": "answered",
        "runId": "run-answered",
        "agentType": "assistant",
        "principal": "ada",
        "tenant": "acme",
        "createdAt": t0,
        "deadlineAt": t0 + HOUR_MS,
        "ageMs": 0,
        "quorum": None,
    }
    assert first.age_ms >= 60_000

    def answer(s: SessionState) -> None:
        s.pending["call-answered"].submitted_at = now_ms()
        s.pending["call-answered"].response = {"approved": True}

    await change(store, "answered", answer)
    await change(store, "expired", lambda s: s.pending.clear())  # a timeout or an abandon
    await change(store, "stopped", lambda s: setattr(s, "status", "interrupted"))
    await change(store, "rerun", lambda s: setattr(s, "run_id", "run-next"))
    async with store.transaction() as conn:
        await conn.execute(sa.text("DELETE FROM __agents_states WHERE session_id = 'deleted'"))
    assert await inbox(store) == [("kept", "call-kept")]
    # A write that does not touch the map leaves the row as it is.
    await change(store, "kept", lambda s: s.metadata.update(note="x"))
    assert await inbox(store) == [("kept", "call-kept")]


async def test_an_operators_sql_edit_of_the_owner_or_the_map_reaches_the_inbox(
    store: SessionStore,
) -> None:
    """The triggers follow any writer: a backfilled tenant, an entry removed by hand."""
    state = await store.create_session(session("s", status="running", run_id="r"))
    await park(store, state, approval("c1", "r", registered=now_ms()))
    page = await list_approvals(store, ApprovalQuery(), now_ms())
    assert [(a.principal, a.tenant) for a in page.approvals] == [(None, None)]
    async with store.transaction() as conn:
        await conn.execute(
            sa.text(
                "UPDATE __agents_states SET tenant = 'acme', principal = 'ops' WHERE session_id = 's'"
            )
        )
    assert await inbox(store, tenant="acme", principal="ops") == [("s", "c1")]
    empty = "'{}'::jsonb" if store.dialect == "postgresql" else "'{}'"
    async with store.transaction() as conn:
        await conn.execute(
            sa.text(f"UPDATE __agents_states SET pending_client_tool_calls = {empty}")
        )
    assert await inbox(store) == []


async def test_filters_and_cursor_pages(store: SessionStore) -> None:
    """Each filter narrows the list; pages of 2 walk every approval once, in order, ties on
    the same millisecond included; a lapsed approval is not listed."""
    now = now_ms()
    rows = [
        # (session, tenant, principal, tool, registered, ttl)
        ("a", "acme", "ada", "transfer", now - 50_000, HOUR_MS),
        ("b", "acme", "bob", "publish", now - 50_000, HOUR_MS),
        ("c", "globex", "cy", "transfer", now - 40_000, 100_000),
        ("d", "acme", "ada", "publish", now - 5_000, HOUR_MS),
        ("e", "acme", "ada", "transfer", now - 90_000, 10_000),  # lapsed
    ]
    for sid, tenant, principal, tool, registered, ttl in rows:
        state = await store.create_session(
            session(sid, status="running", run_id="r", principal=principal, tenant=tenant)
        )
        calls = [
            approval(f"{sid}{n}", "r", tool=tool, registered=registered, ttl=ttl) for n in (1, 2)
        ]
        await park(store, state, *calls)
    # A sub-agent's approval: listed under the child, found by its root too.
    child = await store.create_session(
        session("a-child", root="a", status="running", run_id="rc", tenant="acme", principal="ada")
    )
    await park(store, child, approval("k1", "rc", registered=now - 45_000))

    everything = await inbox(store)
    assert everything == [
        ("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2"), ("a-child", "k1"),
        ("c", "c1"), ("c", "c2"), ("d", "d1"), ("d", "d2"),
    ]  # fmt: skip
    assert await inbox(store, tool="publish") == [
        ("b", "b1"),
        ("b", "b2"),
        ("d", "d1"),
        ("d", "d2"),
    ]
    assert await inbox(store, session_id="a") == [("a", "a1"), ("a", "a2"), ("a-child", "k1")]
    assert await inbox(store, principal="ada") == [
        ("a", "a1"), ("a", "a2"), ("a-child", "k1"), ("d", "d1"), ("d", "d2"),
    ]  # fmt: skip
    assert await inbox(store, tenant="globex") == [("c", "c1"), ("c", "c2")]
    assert await inbox(store, older_than_ms=42_000) == everything[:5]
    assert await inbox(store, deadline_before=now + 100_000) == [("c", "c1"), ("c", "c2")]
    assert await inbox(store, tenant="acme", tool="transfer", older_than_ms=1_000) == [
        ("a", "a1"), ("a", "a2"), ("a-child", "k1"),
    ]  # fmt: skip

    walked: list[tuple[str, str]] = []
    cursor = None
    while True:
        page = await list_approvals(store, ApprovalQuery(limit=2, cursor=cursor), now_ms())
        walked += [(a.session_id, a.tool_call_id) for a in page.approvals]
        assert len(page.approvals) == 2 or page.next_cursor is None
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert walked == everything


def test_cursors_round_trip_and_refuse_other_shapes() -> None:
    key = (1700000000000, "ses.1:é", "call_9")
    assert decode_cursor(encode_cursor(key)) == key
    # Any text of the cursor's shape is a position (a forged NUL cannot reach SQL).
    assert decode_cursor("5.00.61") == (5, "\ufffd", "a")
    for bad in ("", "x", "1.zz.61", "1.6.61", "1.61", "-1.61.61"):
        with pytest.raises(RequestValidationError):
            decode_cursor(bad)


async def test_limits_are_checked(store: SessionStore) -> None:
    for query in (
        ApprovalQuery(limit=0),
        ApprovalQuery(limit=501),
        ApprovalQuery(older_than_ms=-1),
    ):
        with pytest.raises(RequestValidationError):
            await list_approvals(store, query, now_ms())


# -- served by an index (Postgres) ------------------------------------------------------------


def _bulk(url: str, sessions: int, per_session: int) -> None:
    """Sessions parked on approvals, written as a park writes them (the triggers fill the
    inbox), then ANALYZEd as autovacuum would."""
    now = now_ms()
    with psycopg.connect(url) as conn:
        conn.execute(
            """
            INSERT INTO __agents_states (session_id, agent_type, root_session_id, status, run_id,
                created_at, updated_at, principal, tenant)
            SELECT 's' || i, 'banker', 's' || i, 'running', 'r' || i, now(), now(),
                'user' || mod(i, 500), 'tenant' || mod(i, 10)
            FROM generate_series(1, %(n)s) AS i
            """,
            {"n": sessions},
        )
        conn.execute(
            """
            UPDATE __agents_states AS s SET status = 'suspended_client_tool', version = version + 1,
                pending_client_tool_calls = (
                    SELECT jsonb_object_agg('c' || j, jsonb_build_object(
                        'toolCallId', 'c' || j, 'toolName', 'tool' || mod(j, 5),
                        'input', jsonb_build_object('j', j), 'runId', s.run_id,
                        'kind', 'approval', 'index', j, 'registeredAt', %(now)s - j * 1000,
                        'deadlineAt', %(now)s + 3600000, 'completedRetentionMs', 0,
                        'approvalId', s.run_id || '::c' || j, 'argsDigest', 'd'))
                    FROM generate_series(1, %(per)s) AS j)
            """,
            {"now": now, "per": per_session},
        )
        conn.execute("ANALYZE __agents_approvals")


def _plan(url: str, sql: str) -> str:
    with psycopg.connect(url) as conn:
        rows = conn.execute("EXPLAIN " + sql).fetchall()
    return "\n".join(r[0] for r in rows)


def _compiled(query: ApprovalQuery) -> str:
    statement = inbox_statement(query, now_ms()).limit(query.limit + 1)
    dialect = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]
    return str(statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))


@pytest.mark.postgres_only
async def test_the_inbox_queries_use_the_indexes(migrated_pg_url: str) -> None:
    """With 20,000 approvals, the store's first page, its filtered pages, a next page and the
    runbook's statements are index scans in the inbox's order (no sort, no table scan)."""
    _bulk(migrated_pg_url, 4_000, 5)
    cursor = encode_cursor((now_ms() - 3_000, "s77", "c3"))
    expected = {
        "ix___agents_approvals_oldest": [ApprovalQuery(), ApprovalQuery(cursor=cursor)],
        "ix___agents_approvals_tenant": [ApprovalQuery(tenant="tenant3", cursor=cursor)],
        "ix___agents_approvals_tool": [ApprovalQuery(tool="tool2", older_than_ms=1)],
    }
    for index, queries in expected.items():
        for query in queries:
            plan = _plan(migrated_pg_url, _compiled(query))
            # A tenant's next page starts so close to the cursor that the planner may also
            # walk the oldest-first index and filter on the tenant: still in order, no sort.
            allowed = [index] + (["ix___agents_approvals_oldest"] if "tenant" in index else [])
            assert any(f"Index Scan using {i}" in plan for i in allowed), (query, plan)
            assert "Sort" not in plan and "Seq Scan" not in plan, (query, plan)
    # One principal's few approvals: found by its index (the planner may sort those few).
    plan = _plan(migrated_pg_url, _compiled(ApprovalQuery(principal="user7", tenant="tenant7")))
    assert "ix___agents_approvals_principal" in plan and "Seq Scan" not in plan, plan
    blocks = runbook_sql()
    for name, index, params in (
        ("approval-inbox", "ix___agents_approvals_oldest", {}),
        ("approval-inbox-tenant", "ix___agents_approvals_tenant", {"your-tenant": "tenant3"}),
    ):
        lang, sql = blocks[name]
        assert lang == "sql"
        for placeholder, value in params.items():
            sql = sql.replace(f"'{placeholder}'", f"'{value}'")
        plan = _plan(migrated_pg_url, sql.rstrip(";"))
        assert f"Index Scan using {index}" in plan and "Seq Scan" not in plan, (name, plan)
        with psycopg.connect(migrated_pg_url) as conn:
            rows = conn.execute(sql).fetchall()
        assert len(rows) == 50
