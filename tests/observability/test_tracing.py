"""OpenTelemetry: the client-tool wait is a span under the tool call (in-memory exporter)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from helix_dbos.observability import tracing
from helix_dbos.runtime import names

pytestmark = pytest.mark.postgres_only

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (installed once), exporting into memory."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not getattr(provider, "_helix_test_exporter", False):
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        provider._helix_test_exporter = True  # type: ignore[attr-defined]
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


#: A client deadline the test answers well within (seconds, not the answer's milliseconds).
FAR_DEADLINE = 5.0


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _parent_of(span: ReadableSpan, exporter: InMemorySpanExporter) -> ReadableSpan | None:
    if span.parent is None:
        return None
    for other in exporter.get_finished_spans():
        if other.context.span_id == span.parent.span_id:
            return other
    return None


def test_no_sdk_means_no_op_spans() -> None:
    # The API's default provider records nothing; the helper still runs its block.
    ran = []
    with tracing.client_tool_wait_span(
        tool_name="t", tool_call_id="c", session_id="s", run_id="r"
    ) as span:
        span.set_outcome("answered")
        ran.append(True)
    assert ran == [True]
    assert tracing.wait_outcome(None) == "deadline"
    assert tracing.wait_outcome({"kind": "answer"}) == "answered"
    assert tracing.wait_outcome({"kind": "stop"}) == "stopped"
    assert tracing.wait_outcome({"kind": "abandon"}) == "abandoned"


def test_an_unrecorded_wait_keeps_nothing() -> None:
    # Without a recording provider every wait shares one empty handle: a parked turn keeps
    # no span, no context token and no attributes across its park.
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        pytest.skip("an SDK provider is installed in this process")
    first = tracing.client_tool_wait_span(
        tool_name="t", tool_call_id="a", session_id="s", run_id="r"
    )
    second = tracing.client_tool_wait_span(
        tool_name="t", tool_call_id="b", session_id="s", run_id="r"
    )
    assert first is second


def test_an_error_in_the_wait_is_recorded_on_both_spans(spans: InMemorySpanExporter) -> None:
    before = trace.get_current_span()
    with (
        pytest.raises(RuntimeError),
        tracing.client_tool_wait_span(
            tool_name="t", tool_call_id="c", session_id="s", run_id="r", deadline_at=5
        ) as span,
    ):
        assert trace.get_current_span().name == tracing.WAIT_SPAN  # type: ignore[attr-defined]
        span.set_outcome("answered")
        raise RuntimeError("boom")
    assert trace.get_current_span() is before
    (wait,) = _named(spans, tracing.WAIT_SPAN)
    (call,) = _named(spans, tracing.TOOL_CALL_SPAN)
    assert _parent_of(wait, spans) is call
    for span_ in (wait, call):
        assert span_.status.status_code == trace.StatusCode.ERROR
        assert span_.status.description == "RuntimeError: boom"
        assert [e.name for e in span_.events] == ["exception"]
        assert dict(span_.attributes or {})["outcome"] == "answered"
        assert dict(span_.attributes or {})["deadlineAt"] == 5
    assert wait.end_time is not None and call.end_time is not None
    assert wait.end_time <= call.end_time


def test_a_cancelled_wait_ends_its_spans_without_an_error(spans: InMemorySpanExporter) -> None:
    # A cancellation (DBOS cancels a stopped workflow) is not an error of the wait.
    with (
        pytest.raises(asyncio.CancelledError),
        tracing.client_tool_wait_span(tool_name="t", tool_call_id="c", session_id="s", run_id="r"),
    ):
        raise asyncio.CancelledError
    for name in (tracing.WAIT_SPAN, tracing.TOOL_CALL_SPAN):
        (ended,) = _named(spans, name)
        assert ended.end_time is not None
        assert ended.status.status_code == trace.StatusCode.UNSET


async def test_wait_span_nests_under_the_tool_call_with_its_ids(
    launch: Any, spans: InMemorySpanExporter
) -> None:
    # The first call is answered before its deadline: a deadline far from the milliseconds the
    # answer takes, so a busy machine cannot turn it into a timeout.
    runtime = await launch(fast_timeout=FAR_DEADLINE)
    handle = await runtime.start("ops_fast", "pick_color confirm")
    sid = handle.session_id
    (first,) = await runtime.wait_for_pending(sid)
    await runtime.submit_tool_result(sid, first["toolCallId"], result={"color": "red"})
    (second,) = await runtime.wait_for_pending(sid)
    await runtime.wait(sid)  # the second call reaches its deadline

    waits = _named(spans, tracing.WAIT_SPAN)
    assert [w.attributes["toolCallId"] for w in waits] == [  # type: ignore[index]
        first["toolCallId"],
        second["toolCallId"],
    ]
    for wait, call, outcome in ((waits[0], first, "answered"), (waits[1], second, "deadline")):
        attrs = dict(wait.attributes or {})
        assert attrs["toolName"] == call["toolName"]
        assert attrs["sessionId"] == sid
        assert attrs["deadlineAt"] == call["deadlineAt"]
        assert attrs["outcome"] == outcome
        parent = _parent_of(wait, spans)
        assert parent is not None and parent.name == tracing.TOOL_CALL_SPAN
        assert dict(parent.attributes or {})["toolCallId"] == call["toolCallId"]
        assert dict(parent.attributes or {})["toolName"] == call["toolName"]
    # The timed-out wait ended at its deadline, not before (how long after is not a test's to
    # measure; 50 ms covers the deadline's rounding to whole milliseconds).
    assert waits[1].end_time is not None and waits[1].start_time is not None
    assert waits[1].end_time / 1e9 >= second["deadlineAt"] / 1000 - 0.05
    assert waits[1].start_time < waits[1].end_time


async def test_with_dbos_tracing_the_tool_call_nests_under_the_turn_workflow(
    launch: Any, spans: InMemorySpanExporter
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    runtime = await launch(extra_dbos_config={"enable_otlp": True})
    handle = await runtime.start("ops", "pick_color")
    (call,) = await runtime.wait_for_pending(handle.session_id)
    await runtime.submit_tool_result(handle.session_id, call["toolCallId"], result={"color": "red"})
    await runtime.wait(handle.session_id)
    for _ in range(100):  # the workflow span ends just after the turn's last step
        if _named(spans, names.TURN_WORKFLOW):
            break
        await asyncio.sleep(0.02)
    (wait,) = _named(spans, tracing.WAIT_SPAN)
    tool_call = _parent_of(wait, spans)
    assert tool_call is not None and tool_call.name == tracing.TOOL_CALL_SPAN
    workflow = _parent_of(tool_call, spans)
    assert workflow is not None and workflow.name == names.TURN_WORKFLOW
    assert dict(workflow.attributes or {}).get("operationUUID") == handle.workflow_id
    # DBOS's own recv span is inside the wait span.
    (recv,) = [s for s in spans.get_finished_spans() if s.name == "recv"]
    assert _parent_of(recv, spans) is wait
