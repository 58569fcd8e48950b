"""Per-event level control, and the one summary line per finished turn (real turns)."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest

from helix_dbos.observability.log import (
    EVENT_LEVELS,
    reset_event_levels,
    set_event_level,
)
from helix_dbos.testing import capture_log_events
from tests.observability.obs_helpers import events_named, one_event

pytestmark = pytest.mark.postgres_only


def test_every_seed_event_has_its_default_level() -> None:
    expected = {
        "client_tool.suspended": logging.DEBUG,
        "client_tool.submitted": logging.DEBUG,
        "client_tool.timeout": logging.WARNING,
        "client_tool.aborted": logging.WARNING,
        "client_tool.validation_failed": logging.WARNING,
        "client_tool.submit_unknown": logging.WARNING,
        "client_tool.ownership_write_failed": logging.ERROR,
        "client_tool.ownership_clear_failed": logging.ERROR,
        "client_tool.clear_failed_exhausted": logging.ERROR,
        "client_tool.ownership_retry": logging.DEBUG,
        "client_tool.clear_pending_retry": logging.DEBUG,
        "client_tool.send_event_failed": logging.ERROR,
        "server.body_too_large": logging.WARNING,
        "submit_tool_result.result_too_large": logging.WARNING,
    }
    assert {k: EVENT_LEVELS[k] for k in expected} == expected


def test_set_event_level_refuses_an_unknown_level() -> None:
    with pytest.raises(ValueError, match="LOUD"):
        set_event_level("client_tool.*", "LOUD")


async def test_client_tool_events_raised_to_info_reach_an_info_logger(launch: Any) -> None:
    runtime = await launch()
    set_event_level("client_tool.*", "INFO")
    set_event_level("client_tool.timeout", logging.WARNING)  # the latest matching call wins
    set_event_level("turn.summary", "DEBUG")  # and a demotion hides a line at INFO
    with capture_log_events(logging.INFO) as events:
        handle = await runtime.start("ops_fast", "pick_color confirm")
        (first,) = await runtime.wait_for_pending(handle.session_id)
        await runtime.submit_tool_result(
            handle.session_id, first["toolCallId"], result={"color": "red"}
        )
        await runtime.wait(handle.session_id)  # the second call times out
    levels = [(e["event"], e["level"]) for e in events]
    assert levels == [
        ("client_tool.suspended", "INFO"),
        ("client_tool.submitted", "INFO"),
        ("client_tool.suspended", "INFO"),
        ("client_tool.timeout", "WARNING"),
    ]
    # Back to the defaults: at INFO the two per-call lines are gone again.
    reset_event_levels()
    with capture_log_events(logging.INFO) as quiet:
        handle = await runtime.start("ops", "pick_color")
        (call,) = await runtime.wait_for_pending(handle.session_id)
        await runtime.submit_tool_result(
            handle.session_id, call["toolCallId"], result={"color": "red"}
        )
        await runtime.wait(handle.session_id)
    assert [(e["event"], e["level"]) for e in quiet] == [("turn.summary", "INFO")]


def _usage(url: str, session_id: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT source_type, data FROM __agents_usage WHERE session_id = %s", (session_id,)
        ).fetchall()
    tokens = [d for t, d in rows if t == "llm_tokens"]
    return {
        "waits": sorted(d["value"] for t, d in rows if t == "client_tool_wait_ms"),
        "modelCalls": len(tokens),
        "inputTokens": sum(d["inputTokens"] for d in tokens),
        "outputTokens": sum(d["outputTokens"] for d in tokens),
    }


async def test_summary_line_of_a_completed_turn_agrees_with_the_usage_rows(
    launch: Any, pg_url: str
) -> None:
    # The first call is answered within its deadline, the second lapses: a deadline of seconds,
    # far from the milliseconds the answer takes, so a busy machine cannot race it.
    runtime = await launch(fast_timeout=5.0)
    with capture_log_events() as events:
        handle = await runtime.start("ops_fast", "pick_color confirm")
        sid = handle.session_id
        (first,) = await runtime.wait_for_pending(sid)
        await runtime.submit_tool_result(sid, first["toolCallId"], result={"color": "red"})
        view = await runtime.wait(sid)
    summary = one_event(events, "turn.summary")
    usage = _usage(pg_url, sid)
    assert summary["level"] == "INFO"
    assert summary["sessionId"] == sid
    assert summary["runId"] == view["runId"] == f"{handle.run_id}:continuation:2"
    assert summary["outcome"] == "completed"
    assert summary["steps"] == 3 == usage["modelCalls"]
    assert summary["clientCalls"] == 2
    assert 5000 in usage["waits"]  # the timed-out call waited exactly its deadline
    assert summary["waitMs"] == sum(usage["waits"])
    assert summary["inputTokens"] == usage["inputTokens"] == 30
    assert summary["outputTokens"] == usage["outputTokens"]
    assert len(events_named(events, "turn.summary")) == 1


async def test_summary_line_of_a_failed_and_of_an_interrupted_turn(
    launch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.observability.obs_helpers import FlakySaves

    runtime = await launch()
    flaky = FlakySaves(monkeypatch)
    with capture_log_events() as events:
        flaky.arm(3)
        failed = await runtime.start("ops", "pick_color")
        await runtime.wait(failed.session_id)
        stopped = await runtime.start("ops", "pick_color")
        await runtime.wait_for_pending(stopped.session_id)
        await runtime.interrupt(stopped.session_id)
    bad = one_event(events, "turn.summary", sessionId=failed.session_id)
    assert (bad["outcome"], bad["steps"], bad["clientCalls"]) == ("failed", 1, 0)
    assert bad["inputTokens"] == 10
    cut = one_event(events, "turn.summary", sessionId=stopped.session_id)
    assert cut["level"] == "INFO"
    assert cut["outcome"] == "interrupted"
    assert cut["runId"] == stopped.run_id
    assert cut["stoppedCalls"] == 1 and cut["waitMs"] >= 0
