"""The live metrics' collectors (``observability/approval_metrics.py``): what each record adds,
the pending gauges set from the database's figures, and recording only into the active runtime."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from helix_dbos.core.session import Continuation, SubmitAnswer
from helix_dbos.errors import ApprovalMismatchError, RateLimitedError
from helix_dbos.observability import approval_metrics as am
from helix_dbos.observability.approval_metrics import ApprovalMetrics, PendingFigures


@pytest.fixture
def metrics() -> Iterator[ApprovalMetrics]:
    """Fresh metrics, active for the test; whatever was active before is active after."""
    previous = am.active()
    fresh = ApprovalMetrics()
    am.activate(fresh)
    try:
        yield fresh
    finally:
        am.deactivate(fresh)
        if previous is not None:
            am.activate(previous)


def value(metrics: ApprovalMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_wait_is_observed_in_seconds_and_an_expiry_counted(metrics: ApprovalMetrics) -> None:
    """The histogram takes seconds; a negative length (clock skew) counts as 0; only
    ``expired`` adds an expiry."""
    am.record_outcome("edit", "answered", 2500)
    am.record_outcome("edit", "answered", -40)
    am.record_outcome("edit", "expired", 60_000)
    assert value(metrics, "helix_tool_wait_seconds_count", tool="edit", outcome="answered") == 2
    assert value(metrics, "helix_tool_wait_seconds_sum", tool="edit", outcome="answered") == 2.5
    le_1 = value(
        metrics, "helix_tool_wait_seconds_bucket", tool="edit", outcome="answered", le="1.0"
    )
    assert le_1 == 1
    assert value(metrics, "helix_tool_expiries_total", tool="edit") == 1


def test_results_record_only_the_calls_that_waited(metrics: ApprovalMetrics) -> None:
    """A server call's result, or a call never executed, records no wait."""
    results: list[dict[str, Any]] = [
        {"toolName": "lookup", "ok": True},
        {"toolName": "edit", "suspended": True, "outcome": "answered", "waitMs": 1000},
        {"toolName": "pay", "suspended": True, "outcome": "timeout", "waitMs": 5000},
        {"toolName": "pay", "suspended": True, "outcome": "not_executed", "waitMs": 0},
        {
            "toolName": "pay",
            "suspended": True,
            "outcome": "answered",
            "errorCode": "approval_denied",
            "waitMs": 10,
        },
    ]
    am.record_results(results)
    count = "helix_tool_wait_seconds_count"
    assert value(metrics, count, tool="edit", outcome="answered") == 1
    assert value(metrics, count, tool="pay", outcome="expired") == 1
    assert value(metrics, count, tool="pay", outcome="denied") == 1
    assert value(metrics, count, tool="lookup", outcome="answered") is None
    assert value(metrics, "helix_tool_expiries_total", tool="pay") == 1


def test_a_submit_is_counted_by_what_it_answered(metrics: ApprovalMetrics) -> None:
    """An accepted answer by its continuation, an unknown call by its reason, else the
    status; a refusal by its code, under the tool it names."""
    accepted = SubmitAnswer(status="accepted", continuation=Continuation(kind="awaiting_batch"))
    am.record_answer("edit", accepted)
    am.record_answer("edit", SubmitAnswer(status="unknown_tool_call", reason="run_stopped"))
    am.record_answer("edit", SubmitAnswer(status="already_completed"))
    am.record_answer("edit", SubmitAnswer(status="accepted"))
    am.record_refusal(ApprovalMismatchError("digest differs", toolName="pay"))
    am.record_refusal(RateLimitedError("slow down"))
    submits = "helix_submits_total"
    assert value(metrics, submits, tool="edit", answer="awaiting_batch") == 1
    assert value(metrics, submits, tool="edit", answer="run_stopped") == 1
    assert value(metrics, submits, tool="edit", answer="already_completed") == 1
    assert value(metrics, submits, tool="edit", answer="accepted") == 1
    assert value(metrics, submits, tool="pay", answer="approval_mismatch") == 1
    assert value(metrics, submits, tool="", answer="rate_limited") == 1


def test_turns_are_counted_by_outcome(metrics: ApprovalMetrics) -> None:
    """One series per outcome, each counting its own turns."""
    am.record_turn("completed")
    am.record_turn("completed")
    am.record_turn("failed")
    assert value(metrics, "helix_turns_total", outcome="completed") == 2
    assert value(metrics, "helix_turns_total", outcome="failed") == 1


def test_the_pending_gauges_show_every_known_tool(metrics: ApprovalMetrics) -> None:
    """The agents' waiting tools are shown at 0 when nothing of theirs waits; the figures set
    the rest; a tool no longer seen loses its series; the oldest approval's age in seconds."""
    tools = {"pay": "approval", "edit": "client", "lookup": "server"}
    metrics.set_pending(PendingFigures({"pay": 2, "gone": 1}, {}, 1_000), 31_000, tools)
    assert value(metrics, "helix_pending_approvals", tool="pay") == 2
    assert value(metrics, "helix_pending_approvals", tool="gone") == 1
    assert value(metrics, "helix_pending_client_calls", tool="edit") == 0
    assert value(metrics, "helix_pending_approvals", tool="lookup") is None
    assert value(metrics, "helix_oldest_pending_approval_age_seconds") == 30
    metrics.set_pending(PendingFigures({}, {"edit": 3}, None), 40_000, tools)
    assert value(metrics, "helix_pending_approvals", tool="pay") == 0
    assert value(metrics, "helix_pending_approvals", tool="gone") is None
    assert value(metrics, "helix_pending_client_calls", tool="edit") == 3
    assert value(metrics, "helix_oldest_pending_approval_age_seconds") == 0


def test_an_approval_parked_in_the_future_has_no_negative_age(metrics: ApprovalMetrics) -> None:
    """Another process's clock may be ahead: the age is 0, never negative."""
    metrics.set_pending(PendingFigures({"pay": 1}, {}, 50_000), 40_000)
    assert value(metrics, "helix_oldest_pending_approval_age_seconds") == 0


def test_nothing_is_recorded_without_an_active_runtime() -> None:
    """Recording is a no-op then (a process that launched no runtime, or one shut down)."""
    idle = ApprovalMetrics()
    previous = am.active()
    if previous is not None:
        am.deactivate(previous)
    try:
        am.record_outcome("edit", "expired", 1)
        am.record_submit("edit", "accepted")
        am.record_turn("completed")
    finally:
        if previous is not None:
            am.activate(previous)
    assert b"helix_turns_total{" not in idle.exposition()
    assert value(idle, "helix_tool_expiries_total", tool="edit") is None


def test_deactivating_another_runtime_keeps_the_active_one(metrics: ApprovalMetrics) -> None:
    """A runtime that shuts down stops only its own recording."""
    other = ApprovalMetrics()
    am.deactivate(other)
    assert am.active() is metrics
    am.record_turn("failed")
    assert value(metrics, "helix_turns_total", outcome="failed") == 1
    assert value(other, "helix_turns_total", outcome="failed") is None


def test_the_exposition_is_prometheus_text_of_its_own_registry(metrics: ApprovalMetrics) -> None:
    """Each runtime's registry holds its own series; the text names every family."""
    am.record_turn("completed")
    text = metrics.exposition().decode()
    for family in (
        "helix_pending_approvals",
        "helix_pending_client_calls",
        "helix_oldest_pending_approval_age_seconds",
        "helix_tool_wait_seconds",
        "helix_tool_expiries_total",
        "helix_submits_total",
        "helix_turns_total",
    ):
        assert f"# TYPE {family} " in text
    assert 'helix_turns_total{outcome="completed"} 1.0' in text
    assert "text/plain" in am.CONTENT_TYPE
    assert b'outcome="completed"' not in ApprovalMetrics().exposition()
