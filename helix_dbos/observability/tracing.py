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

from types import TracebackType
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
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # pragma: no cover - the API is optional
    _trace = None  # type: ignore[assignment]


class WaitSpan:
    """The handle ``client_tool_wait_span`` returns: a context manager around the parked wait;
    set how the wait ended with ``set_outcome``.

    A plain slotted object, not a generator-based context manager: it stays alive for as long
    as the turn is parked, and a parked turn should hold as little as possible. When nothing
    records (no SDK, or a sampler that drops the trace) every call shares one empty handle.
    """

    __slots__ = ("_call", "_token", "_wait")

    def __init__(self, call: Any = None, wait: Any = None) -> None:
        self._call = call
        self._wait = wait
        self._token: Any = None

    def set_outcome(self, outcome: str) -> None:
        """Record ``outcome`` (``answered``, ``deadline``, ``stopped``, ``abandoned``)."""
        for span in (self._call, self._wait):
            if span is not None:
                span.set_attribute("outcome", outcome)

    def __enter__(self) -> WaitSpan:
        if self._wait is not None:
            # The wait span is current while parked: DBOS's own ``recv`` span nests in it.
            self._token = _context.attach(_trace.set_span_in_context(self._wait))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _context.detach(self._token)
            self._token = None
        # As ``start_as_current_span`` does: an error (not a cancellation) is recorded on both
        # spans; the wait span ends first.
        for span in (self._wait, self._call):
            if span is None:
                continue
            if isinstance(exc, Exception) and span.is_recording():
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            span.end()
        self._call = self._wait = None


_NOTHING = WaitSpan()
"""The handle of every wait that records nothing (it holds nothing, so it is shared)."""


def wait_outcome(message: object) -> str:
    """How a parked ``recv`` ended, from the message it returned (``None`` at the deadline)."""
    if message is None:
        return "deadline"
    kind = message.get("kind") if isinstance(message, dict) else None
    return {"answer": "answered", "stop": "stopped", "abandon": "abandoned"}.get(
        str(kind), "answered"
    )


def client_tool_wait_span(
    *,
    tool_name: str,
    tool_call_id: str,
    session_id: str,
    run_id: str,
    deadline_at: int | None = None,
    kind: str = "client",
) -> WaitSpan:
    """Spans for one parked client call: ``helix.tool_call`` > ``helix.client_tool.wait``.

    Both start when this is called; use it at once in a ``with`` statement around the
    ``recv`` that parks the turn (leaving the block ends them)::

        with client_tool_wait_span(tool_name=..., tool_call_id=..., session_id=...,
                                   run_id=..., deadline_at=...) as span:
            message = await DBOS.recv_async(topic, timeout_seconds=remaining)
            span.set_outcome(wait_outcome(message))
    """
    if _trace is None:
        return _NOTHING
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
    call = tracer.start_span(TOOL_CALL_SPAN, attributes=attributes)
    wait = tracer.start_span(
        WAIT_SPAN, context=_trace.set_span_in_context(call), attributes=attributes
    )
    if not (call.is_recording() or wait.is_recording()):
        # Nothing to record: end the no-op spans now, keep nothing across the park.
        wait.end()
        call.end()
        return _NOTHING
    return WaitSpan(call, wait)
