"""Usage rows in ``__agents_usage``: written by the step that observes them, never twice.

A dataset of real turns (two answered calls, one timeout, one abort) must produce exactly the
rows the runbook's queries read, and a replay (the same workflow id started again, a recorded
step re-run after a crash, or the same rows recorded twice) must leave them unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbos import DBOS, SetWorkflowID

from helix_dbos.observability import metrics
from helix_dbos.runtime._turn.workflow import run_turn
from tests.observability.obs_helpers import crash_a_parked_turn, populate

pytestmark = pytest.mark.postgres_only

HERE = Path(__file__).parent
#: Client deadlines: FAST lapses, but only after the test has seen its call pending.
TIMEOUT, FAST = 30.0, 2.0


def _rows(url: str, kind: str | None = None) -> list[dict[str, Any]]:
    query = (
        "SELECT kind, source_type, source_name, data, session_id, run_id, timestamp,"
        " dedupe_key FROM __agents_usage"
    )
    params: tuple[Any, ...] = ()
    if kind:
        query += " WHERE kind = %s"
        params = (kind,)
    with psycopg.connect(url) as conn:
        cur = conn.execute(query + " ORDER BY id", params)
        names = [c.name for c in cur.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


async def test_one_timeout_one_abort_two_answers_make_exactly_these_rows(
    launch: Any, pg_url: str
) -> None:
    runtime = await launch(timeout=TIMEOUT, fast_timeout=FAST)
    data = await populate(runtime, timeout=TIMEOUT, fast_timeout=FAST)
    custom = _rows(pg_url, "custom")

    # Every row: kind custom, the tool's name as source_name, data.value, epoch-ms timestamp.
    got = sorted((r["source_type"], r["source_name"], r["data"]["toolCallId"]) for r in custom)
    want = sorted(
        [(metrics.CLIENT_TOOL_WAIT_MS, c.tool_name, c.tool_call_id) for c in data.calls]
        + [(metrics.CLIENT_TOOL_TIMEOUT, c.tool_name, c.tool_call_id) for c in data.by("timeout")]
        + [(metrics.CLIENT_TOOL_ABORT, c.tool_name, c.tool_call_id) for c in data.by("aborted")]
    )
    assert got == want
    assert len(custom) == 6
    by_call = {(r["source_type"], r["data"]["toolCallId"]): r for r in custom}
    for call in data.calls:
        wait = by_call[(metrics.CLIENT_TOOL_WAIT_MS, call.tool_call_id)]
        assert call.wait_low <= wait["data"]["value"] <= call.wait_high, call
        assert wait["session_id"] == call.session_id
        root = await runtime.session(call.session_id)
        # Written in the step that settled the call: the same instant as its tombstone.
        assert wait["timestamp"] == root.completed[call.tool_call_id].completed_at
    (timeout,) = data.by("timeout")
    assert (
        by_call[(metrics.CLIENT_TOOL_WAIT_MS, timeout.tool_call_id)]["data"]["value"] == FAST * 1000
    )
    counters = [r for r in custom if r["source_type"] != metrics.CLIENT_TOOL_WAIT_MS]
    assert [r["data"]["value"] for r in counters] == [1, 1]
    assert not [r for r in custom if r["source_type"] == metrics.CLIENT_TOOL_RUNTIME_RESTARTED]

    # One token row per model call: answered 3 steps, timeout 2, aborted 1.
    tokens = _rows(pg_url, "tokens")
    per_session = {
        sid: sum(1 for r in tokens if r["session_id"] == sid) for sid in data.sessions.values()
    }
    assert per_session == {
        data.sessions["answered"]: 3,
        data.sessions["timeout"]: 2,
        data.sessions["aborted"]: 1,
    }
    assert {(r["source_type"], r["source_name"]) for r in tokens} == {("llm_tokens", "scripted")}
    assert all(
        r["data"]["inputTokens"] == 10
        and r["data"]["value"] == r["data"]["inputTokens"] + r["data"]["outputTokens"]
        for r in tokens
    )


async def test_a_replay_never_counts_twice(launch: Any, pg_url: str) -> None:
    runtime = await launch()
    handle = await runtime.start("ops", "pick_color")
    sid = handle.session_id
    (call,) = await runtime.wait_for_pending(sid)
    await runtime.submit_tool_result(sid, call["toolCallId"], result={"color": "red"})
    outcome = await handle.result()
    before = _rows(pg_url)
    messages = await runtime.messages(sid)
    llm = runtime.registry.get("ops").llm
    model_calls = llm.calls

    # The same workflow id started again returns the recorded result; no step runs again.
    with SetWorkflowID(handle.workflow_id or ""):
        again = await DBOS.start_workflow_async(run_turn, sid, handle.run_id, "ops", sid)
    assert await again.get_result() == outcome
    # Resuming a finished workflow is a no-op, too.
    await DBOS.resume_workflow_async(handle.workflow_id or "")
    assert _rows(pg_url) == before
    assert await runtime.messages(sid) == messages
    assert llm.calls == model_calls

    # The same rows recorded again (what a re-executed step would write) are skipped.
    root = await runtime.session(sid)
    stone = root.completed[call["toolCallId"]]
    replayed = metrics.wait_row(
        session_id=sid,
        run_id=stone.run_id,
        tool_call_id=call["toolCallId"],
        tool_name="pick_color",
        wait_ms=999_999,
        at_ms=stone.completed_at + 5,
    )
    await runtime.store.record_usage([replayed, replayed])
    assert _rows(pg_url) == before


async def test_a_turn_recovered_after_a_crash_counts_each_model_call_once(
    launch: Any, pg_url: str
) -> None:
    parked = crash_a_parked_turn(pg_url)
    sid = parked["sessionId"]
    assert len(_rows(pg_url, "tokens")) == 1  # the first model call, before the crash

    # Same executor id and version: launching recovers the parked turn, which replays its
    # recorded model call and commit, and parks again on the same call.
    runtime = await launch()
    (pending,) = await runtime.wait_for_pending(sid, timeout=20)
    assert pending["toolCallId"] == parked["toolCallId"]
    await runtime.submit_tool_result(sid, pending["toolCallId"], result={"color": "blue"})
    view = await runtime.wait(sid)
    assert view["status"] == "completed"

    tokens = _rows(pg_url, "tokens")
    assert sorted(r["dedupe_key"] for r in tokens) == sorted(
        [f"{parked['runId']}:0:llm_tokens", f"{parked['runId']}:continuation:1:llm_tokens"]
    )
    waits = _rows(pg_url, "custom")
    assert [(r["source_type"], r["data"]["toolCallId"]) for r in waits] == [
        (metrics.CLIENT_TOOL_WAIT_MS, parked["toolCallId"])
    ]
    # Only the second model call ran in this process: the first was replayed from its record.
    assert runtime.registry.get("ops").llm.calls == 1
    roles = [m.role for m in await runtime.messages(sid)]
    assert roles == ["user", "assistant", "tool", "assistant"]
