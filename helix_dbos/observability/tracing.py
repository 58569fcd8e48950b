"""OpenTelemetry spans around a client-tool wait, through ``opentelemetry-api`` only.

``client_tool_wait_span`` opens a ``helix.tool_call`` span for the call and, inside it, a
``helix.client_tool.wait`` span for the time the turn is parked on it. Both carry the
``toolName`` and ``toolCallId`` attributes (the log events' field names), so a trace joins the
log lines of the same call. When DBOS tracing is on (``enable_otlp``) the spans nest under the
turn workflow's span.

Without an OpenTelemetry SDK (or without ``opentelemetry-api`` at all) every span is a no-op:
the library never installs a tracer provider or an exporter, the application does.

A parked turn that replays after a restart opens the spans again for the remaining wait; a
recorded answer makes that second wait span near zero long.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "TOOL_CALL_SPAN",
    "TRACER_NAME",
    "WAIT_SPAN",
    "WaitSpan",
    "client_tool_wait_span",
    "wait_outcome",
]

TRACER_NAME = "helix_dbos"
TOOL_CALL_SPAN = "helix.tool_call"
WAIT_SPAN = "helix.client_tool.wait"

try:
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - the API is optional
    _trace = None  # type: ignore[assignment]


class WaitSpan:
    """The handle ``client_tool_wait_span`` yields: set how the wait ended."""

    def __init__(self, spans: tuple[Any, ...] = ()) -> None:
        self._spans = spans

    def set_outcome(self, outcome: str) -> None:
        """Record ``outcome`` (``answered``, ``deadline``, ``stopped``, ``abandoned``)."""
        for span in self._spans:
            span.set_attribute("outcome", outcome)


def wait_outcome(message: object) -> str:
    """How a parked ``recv`` ended, from the message it returned (``None`` at the deadline)."""
    if message is None:
        return "deadline"
    kind = message.get("kind") if isinstance(message, dict) else None
    return {"answer": "answered", "stop": "stopped", "abandon": "abandoned"}.get(
        str(kind), "answered"
    )


@contextmanager
def client_tool_wait_span(
    *,
    tool_name: str,
    tool_call_id: str,
    session_id: str,
    run_id: str,
    deadline_at: int | None = None,
    kind: str = "client",
) -> Iterator[WaitSpan]:
    """Spans for one parked client call: ``helix.tool_call`` > ``helix.client_tool.wait``.

    Usage, around the ``recv`` that parks the turn::

        with client_tool_wait_span(tool_name=..., tool_call_id=..., session_id=...,
                                   run_id=..., deadline_at=...) as span:
            message = await DBOS.recv_async(topic, timeout_seconds=remaining)
            span.set_outcome(wait_outcome(message))
    """
    if _trace is None:
        yield WaitSpan()
        return
    attributes: dict[str, str | int] = {
        "toolName": tool_name,
        "toolCallId": tool_call_id,
        "sessionId": session_id,
        "runId": run_id,
        "kind": kind,
    }
    if deadline_at is not None:
        attributes["deadlineAt"] = deadline_at
    tracer = _trace.get_tracer(TRACER_NAME)
    with (
        tracer.start_as_current_span(TOOL_CALL_SPAN, attributes=attributes) as call,
        tracer.start_as_current_span(WAIT_SPAN, attributes=attributes) as wait,
    ):
        yield WaitSpan((call, wait))
