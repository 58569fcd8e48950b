"""Every client-tool log event, captured from real turns (real DBOS, real Postgres).

Each test drives a turn through the runtime and reads the events the ``helix_dbos`` logger
emitted: their level, their fields, and the ``service`` tag when one is set.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from dbos import DBOS

from helix_dbos.errors import InvalidResultError, PayloadTooLargeError, StaleStateError
from helix_dbos.http.app import create_app
from helix_dbos.observability.log import UNCONFIGURED_DEFAULT, logger
from helix_dbos.runtime._turn import wake
from helix_dbos.testing import capture_log_events
from tests.observability.obs_helpers import FlakySaves, events_named, one_event

pytestmark = pytest.mark.postgres_only


async def _parked(
    runtime: Any, agent: str = "ops", plan: str = "pick_color"
) -> tuple[str, dict[str, Any]]:
    handle = await runtime.start(agent, plan)
    (pending,) = await runtime.wait_for_pending(handle.session_id)
    return handle.session_id, pending


async def test_suspended_and_submitted_are_debug_with_their_fields(launch: Any) -> None:
    runtime = await launch(service_name="api-v2")
    with capture_log_events() as events:
        handle = await runtime.start("ops", "pick_color confirm")
        (first,) = await runtime.wait_for_pending(handle.session_id)
        await runtime.submit_tool_result(
            handle.session_id, first["toolCallId"], result={"color": "red"}
        )
        (second,) = await runtime.wait_for_pending(handle.session_id)
        await runtime.submit_tool_result(handle.session_id, second["toolCallId"], error="denied")
        await runtime.wait(handle.session_id)

    sid = handle.session_id
    suspended = one_event(events, "client_tool.suspended", toolCallId=first["toolCallId"])
    assert suspended == {
        "event": "client_tool.suspended",
        "level": "DEBUG",
        "sessionId": sid,
        "runId": handle.run_id,
        "toolCallId": first["toolCallId"],
        "toolName": "pick_color",
        "deadlineAt": first["deadlineAt"],
        "kind": "client",
        "service": "api-v2",
    }
    submitted = one_event(events, "client_tool.submitted", toolCallId=first["toolCallId"])
    assert submitted["level"] == "DEBUG"
    assert submitted["hasError"] is False
    assert submitted["sessionId"] == sid and submitted["ownerSessionId"] == sid
    assert submitted["runId"] == handle.run_id and submitted["toolName"] == "pick_color"
    assert submitted["service"] == "api-v2"
    errored = one_event(events, "client_tool.submitted", toolCallId=second["toolCallId"])
    assert errored["hasError"] is True and errored["toolName"] == "confirm"
    second_suspended = one_event(events, "client_tool.suspended", toolCallId=second["toolCallId"])
    assert second_suspended["runId"] == f"{handle.run_id}:continuation"
    # Two calls: exactly two suspended and two submitted, nothing above DEBUG but the summary.
    assert len(events_named(events, "client_tool.suspended")) == 2
    assert len(events_named(events, "client_tool.submitted")) == 2
    assert {e["event"] for e in events if e["level"] != "DEBUG"} == {"turn.summary"}


async def test_timeout_is_a_warning_with_the_deadline(launch: Any) -> None:
    runtime = await launch(fast_timeout=2.0)  # lapses after the test saw it pending
    with capture_log_events() as events:
        sid, pending = await _parked(runtime, "ops_fast")
        view = await runtime.wait(sid)
        late = await runtime.submit_tool_result(sid, pending["toolCallId"], result={"color": "red"})
    assert view["status"] == "completed"
    timeout = one_event(events, "client_tool.timeout")
    assert timeout["level"] == "WARNING"
    assert timeout["sessionId"] == sid
    assert timeout["toolCallId"] == pending["toolCallId"]
    assert timeout["toolName"] == "pick_color"
    assert timeout["deadlineAt"] == pending["deadlineAt"]
    suspended = one_event(events, "client_tool.suspended")
    assert (
        suspended["deadlineAt"] == timeout["deadlineAt"] and suspended["runId"] == timeout["runId"]
    )
    # The client's answer came after the deadline: refused, and logged as late, not submitted.
    assert late.status == "unknown_tool_call" and late.reason == "deadline_lapsed"
    assert events_named(events, "client_tool.submitted") == []
    late_event = one_event(events, "client_tool.submit_late")
    assert late_event["level"] == "WARNING"
    assert late_event["toolCallId"] == pending["toolCallId"]
    assert late_event["sessionId"] == sid


@pytest.mark.parametrize("abort", [False, True])
async def test_aborted_is_a_warning_for_each_stopped_call(launch: Any, abort: bool) -> None:
    runtime = await launch()
    with capture_log_events() as events:
        sid, pending = await _parked(runtime)
        if abort:
            await runtime.abort(sid, reason="operator")
        else:
            await runtime.interrupt(sid)
    aborted = one_event(events, "client_tool.aborted")
    assert aborted["level"] == "WARNING"
    assert aborted["sessionId"] == sid
    assert aborted["toolCallId"] == pending["toolCallId"]
    assert aborted["toolName"] == "pick_color"
    assert aborted["deadlineAt"] == pending["deadlineAt"]
    assert aborted["abort"] is abort
    assert (await runtime.session(sid)).status == ("failed" if abort else "interrupted")


async def test_validation_failed_is_a_warning_and_nothing_is_stored(launch: Any) -> None:
    runtime = await launch()
    with capture_log_events() as events:
        sid, pending = await _parked(runtime)
        with pytest.raises(InvalidResultError):
            await runtime.submit_tool_result(sid, pending["toolCallId"], result={"colour": 1})
    failed = one_event(events, "client_tool.validation_failed")
    assert failed["level"] == "WARNING"
    assert failed["sessionId"] == sid
    assert failed["toolCallId"] == pending["toolCallId"]
    assert failed["toolName"] == "pick_color"
    assert events_named(events, "client_tool.submitted") == []
    state = await runtime.session(sid)
    assert state.pending[pending["toolCallId"]].submitted_at is None
    await runtime.interrupt(sid)


async def test_submit_unknown_names_each_reason(launch: Any) -> None:
    runtime = await launch()
    with capture_log_events() as events:
        missing = await runtime.submit_tool_result("ses_nope", "call_1", result={"color": "red"})
        sid, pending = await _parked(runtime)
        wrong = await runtime.submit_tool_result(sid, "call_other", result={"color": "red"})
        await runtime.submit_tool_result(sid, pending["toolCallId"], result={"color": "red"})
        await runtime.wait(sid)
        absent = await runtime.submit_tool_result(sid, "call_other", result={"color": "red"})
    assert {missing.status, wrong.status, absent.status} == {"unknown_tool_call"}
    unknown = events_named(events, "client_tool.submit_unknown")
    assert [(e["level"], e["sessionId"], e["toolCallId"], e["reason"]) for e in unknown] == [
        ("WARNING", "ses_nope", "call_1", "root_state_not_found"),
        ("WARNING", sid, "call_other", "ownership_missing_toolcall"),
        ("WARNING", sid, "call_other", "ownership_map_absent"),
    ]


async def test_result_too_large_is_a_warning_with_sizes(launch: Any) -> None:
    runtime = await launch(max_result_bytes=64)
    with capture_log_events() as events:
        sid, pending = await _parked(runtime)
        with pytest.raises(PayloadTooLargeError):
            await runtime.submit_tool_result(
                sid, pending["toolCallId"], result={"color": "x" * 100}
            )
    event = one_event(events, "submit_tool_result.result_too_large")
    assert event["level"] == "WARNING"
    assert (event["sessionId"], event["toolCallId"]) == (sid, pending["toolCallId"])
    assert event["limitBytes"] == 64 and event["sizeBytes"] == len('{"color":""}') + 100
    await runtime.interrupt(sid)


async def test_body_too_large_is_a_warning_before_the_body_is_read(launch: Any) -> None:
    runtime = await launch(max_result_bytes=64)
    app = create_app(runtime, allow_unauthenticated=True)
    body = b'{"sessionId": "ses_x", "toolCallId": "call_x", "result": "' + b"x" * 400 + b'"}'
    with capture_log_events() as events:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://helix"
        ) as client:
            response = await client.post(
                "/submit-tool-result", content=body, headers={"content-type": "application/json"}
            )
    assert response.status_code == 413
    event = one_event(events, "server.body_too_large")
    assert event["level"] == "WARNING"
    assert event["sizeBytes"] == len(body) and event["limitBytes"] == 4 * 64
    assert event["route"] == "submit-tool-result"
    # Refused before it was read: nothing reached the submit path.
    assert events_named(events, "client_tool.submit_unknown") == []


# -- compare-and-swap exhaustion, provoked for real -------------------------------------------


async def test_ownership_write_exhaustion_retries_then_fails_loud(
    launch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = await launch()
    flaky = FlakySaves(monkeypatch)
    with capture_log_events() as events:
        flaky.arm(3)  # the registering write (pending + ownership) loses all three attempts
        handle = await runtime.start("ops", "pick_color")
        view = await runtime.wait(handle.session_id)
    assert flaky.raised == 3
    retries = events_named(events, "client_tool.ownership_retry")
    assert [(e["level"], e["attempt"]) for e in retries] == [("DEBUG", 1), ("DEBUG", 2)]
    failed = one_event(events, "client_tool.ownership_write_failed")
    assert failed["level"] == "ERROR"
    assert failed["sessionIds"] == [handle.session_id]
    assert failed["attempts"] == 3
    # Fail loud: the turn fails with the conflict, and no call was registered.
    assert view["status"] == "failed"
    assert view["error"]["code"] == StaleStateError.code
    assert events_named(events, "client_tool.suspended") == []


async def test_clear_pending_exhaustion_retries_then_fails_loud(
    launch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = await launch()
    flaky = FlakySaves(monkeypatch)
    with capture_log_events() as events:
        sid, pending = await _parked(runtime)
        await runtime.submit_tool_result(sid, pending["toolCallId"], result={"color": "red"})
        flaky.arm(5)  # the drain's clear (pending, ownership, tombstone) loses all five
        view = await runtime.wait(sid)
    assert flaky.raised == 5
    retries = events_named(events, "client_tool.clear_pending_retry")
    assert [(e["level"], e["attempt"]) for e in retries] == [("DEBUG", n) for n in range(1, 5)]
    failed = one_event(events, "client_tool.clear_failed_exhausted")
    assert failed["level"] == "ERROR"
    assert failed["sessionIds"] == [sid]
    assert failed["attempts"] == 5
    assert view["status"] == "failed"
    assert view["error"]["code"] == StaleStateError.code


async def test_ownership_clear_exhaustion_on_interrupt(
    launch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = await launch()
    flaky = FlakySaves(monkeypatch)
    with capture_log_events() as events:
        sid, pending = await _parked(runtime)
        flaky.arm(5)
        with pytest.raises(StaleStateError):
            await runtime.interrupt(sid)
        # The operator retries; the store is healthy again.
        state = await runtime.interrupt(sid)
    assert state.status == "interrupted"
    failed = one_event(events, "client_tool.ownership_clear_failed")
    assert failed["level"] == "ERROR"
    assert failed["sessionIds"] == [sid]
    assert len(events_named(events, "client_tool.clear_pending_retry")) == 4
    one_event(events, "client_tool.aborted", toolCallId=pending["toolCallId"])


# -- a failed wake-up ----------------------------------------------------------------------


def _failing_send(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fail the first wake-up of an answer, on whichever path the submit sends it: after the
    commit (``DBOS.send_async``) or enlisted in the store transaction (``wake.enlist``)."""
    failed: list[str] = []

    def fail_first(destination_id: str, message: Any) -> None:
        if isinstance(message, dict) and message.get("kind") == "answer" and not failed:
            failed.append(destination_id)
            raise ConnectionError("system database unreachable")

    send_async = DBOS.send_async

    async def failing_send_async(
        destination_id: str, message: Any, topic: str | None = None, **kwargs: Any
    ) -> None:
        fail_first(destination_id, message)
        await send_async(destination_id, message, topic, **kwargs)

    enlist = wake.enlist

    async def failing_enlist(ctx: Any, destination_id: str, message: Any, *args: Any) -> None:
        fail_first(destination_id, message)
        await enlist(ctx, destination_id, message, *args)

    monkeypatch.setattr(DBOS, "send_async", failing_send_async)
    monkeypatch.setattr(wake, "enlist", failing_enlist)
    return failed


async def test_send_event_failed_answer_still_lands_at_the_deadline(
    launch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = await launch(timeout=1.5)
    failed = _failing_send(monkeypatch)
    with capture_log_events() as events:
        sid, pending = await _parked(runtime)
        answer = await runtime.submit_tool_result(
            sid, pending["toolCallId"], result={"color": "teal"}
        )
        view = await runtime.wait(sid, timeout=10)
    assert failed and answer.status == "accepted"
    event = one_event(events, "client_tool.send_event_failed")
    assert event["level"] == "ERROR"
    assert event["sessionId"] == sid and event["toolCallId"] == pending["toolCallId"]
    assert "unreachable" in event["error"]
    # The stored answer is drained at the deadline: the model got it, nothing timed out.
    assert view["status"] == "completed"
    assert events_named(events, "client_tool.timeout") == []
    tool = [m for m in await runtime.messages(sid) if m.role == "tool"]
    assert [m.result for m in tool] == [{"color": "teal"}]


async def test_a_failed_send_is_sent_again_after_the_commit(
    launch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wake-up enlisted in the answer's transaction fails (logged); the answer still
    commits, and the same wake-up is sent again after the commit: the turn continues at once,
    not at its 30 s deadline."""
    runtime = await launch(timeout=30)
    _failing_send(monkeypatch)
    with capture_log_events() as events:
        sid, pending = await _parked(runtime)
        first = await runtime.submit_tool_result(
            sid, pending["toolCallId"], result={"color": "teal"}
        )
        view = await runtime.wait(sid, timeout=15)
        again = await runtime.submit_tool_result(
            sid, pending["toolCallId"], result={"color": "other"}
        )
    assert first.status == "accepted" and again.status == "already_completed"
    one_event(events, "client_tool.send_event_failed")
    assert view["status"] == "completed"
    tool = [m for m in await runtime.messages(sid) if m.role == "tool"]
    assert [m.result for m in tool] == [{"color": "teal"}]  # the first answer won


# -- the logger itself ---------------------------------------------------------------------


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_records_carry_structured_extra_and_the_library_adds_only_its_default(
    launch: Any,
) -> None:
    runtime = await launch(service_name="worker-west")
    assert logger.name == "helix_dbos"
    # The one handler the library adds prints only where nothing is configured.
    assert logger.handlers == [UNCONFIGURED_DEFAULT] and logger.propagate is True
    assert logger.level == logging.NOTSET
    handler = _Records()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        sid, pending = await _parked(runtime)
        await runtime.submit_tool_result(sid, pending["toolCallId"], result={"color": "red"})
        await runtime.wait(sid)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    assert logger.handlers == [UNCONFIGURED_DEFAULT]
    (record,) = [r for r in handler.records if getattr(r, "event", None) == "client_tool.suspended"]
    assert record.name == "helix_dbos" and record.levelno == logging.DEBUG
    assert record.getMessage() == "client_tool.suspended"
    fields = record.fields  # type: ignore[attr-defined]
    assert fields["toolCallId"] == pending["toolCallId"] and fields["service"] == "worker-west"
    # Flattened copies for formatters that read record attributes.
    assert record.toolCallId == pending["toolCallId"]  # type: ignore[attr-defined]
    assert record.sessionId == sid  # type: ignore[attr-defined]
    assert record.service == "worker-west"  # type: ignore[attr-defined]
