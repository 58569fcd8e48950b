"""What a failed turn records: a code and a fixed message; the exception's text goes to the
log only (scrubbed), never to the session, ``/status`` or the stream."""

from __future__ import annotations

import pytest
from dbos import error as dbos_error

from helix_dbos.errors import ErrorCode, HelixError
from helix_dbos.runtime._turn.failure import FIXED_MESSAGES, failure_of, internal_error, turn_error
from helix_dbos.testing import capture_log_events

SECRET = "postgresql://app:hunter2@db/prod SELECT * FROM users"


def raised(exc: Exception) -> Exception:
    """``exc`` as a handler sees it: raised, with its traceback."""
    try:
        raise exc
    except Exception as caught:
        return caught


def test_the_error_carries_the_fixed_message_never_the_exception_text() -> None:
    """Code, the code's own message and ``retryable``; the driver's text stays out."""
    error = turn_error(
        raised(RuntimeError(SECRET)),
        "state_conflict",
        retryable=True,
        session_id="ses_1",
        run_id="run_1",
    )
    assert error == {
        "code": "state_conflict",
        "message": "The session changed under the turn too often to commit.",
        "retryable": True,
    }
    assert "hunter2" not in str(error)


def test_an_unknown_code_gets_a_generic_message() -> None:
    """A code without a message of its own still reveals nothing."""
    error = turn_error(None, "something_new", session_id="s", run_id="r")
    assert error == {"code": "something_new", "message": "The turn failed.", "retryable": False}


def test_the_exception_goes_to_the_log_through_the_scrubber() -> None:
    """One ``turn.error_detail`` event: the exception's type, its text as the scrubber left
    it, and where it was raised."""
    with capture_log_events() as events:
        turn_error(
            raised(ValueError(SECRET)),
            "framework_internal_error",
            session_id="ses_1",
            run_id="run_1",
            scrubber=lambda text: text.replace("hunter2", "***"),
        )
    [event] = events
    assert (event["event"], event["level"]) == ("turn.error_detail", "WARNING")
    assert (event["sessionId"], event["runId"], event["code"]) == (
        "ses_1",
        "run_1",
        "framework_internal_error",
    )
    assert event["detail"].startswith("ValueError: postgresql://app:***@db/prod")
    assert "hunter2" not in event["detail"]
    assert "test_failure.py" in event["detail"] and "raised" in event["detail"]


def test_no_exception_no_log() -> None:
    """A failure without an exception (max steps) logs no detail."""
    with capture_log_events() as events:
        turn_error(None, "max_steps_exceeded", session_id="s", run_id="r")
    assert events == []


def test_an_exception_that_was_never_raised_is_logged_too() -> None:
    """No traceback: the detail is the type and text alone, no crash."""
    with capture_log_events() as events:
        turn_error(KeyError("k"), "framework_internal_error", session_id="s", run_id="r")
    assert events[0]["detail"].startswith("KeyError: 'k'")


@pytest.mark.parametrize("code", sorted(FIXED_MESSAGES))
def test_every_fixed_message_is_for_a_known_code(code: str) -> None:
    """Each code with a fixed message is one of the framework's codes."""
    assert code in set(ErrorCode)


def test_an_internal_error_reveals_nothing() -> None:
    """``framework_internal_error``, the fixed message, not retryable, no details."""
    error = internal_error()
    assert error.to_body() == {
        "error": "An internal error ended the turn.",
        "code": "framework_internal_error",
        "retryable": False,
    }


def test_a_typed_error_ends_the_turn_as_itself() -> None:
    """A ``HelixError`` escaping the turn is the error it ends with, code and all."""
    error = HelixError("typed", retryable=True)
    assert failure_of(error) is error


def test_a_step_out_of_retries_ends_with_its_last_typed_error() -> None:
    """A step that kept failing ends the turn with the last ``HelixError`` among its
    attempts' errors (the provider's latest word), not the first, nor an untyped one."""
    first, last = HelixError("first"), HelixError("last")
    exhausted = dbos_error.DBOSMaxStepRetriesExceeded(
        "model", 3, [first, last, RuntimeError(SECRET)]
    )
    assert failure_of(exhausted) is last


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError(SECRET),
        dbos_error.DBOSMaxStepRetriesExceeded("model", 3, [RuntimeError(SECRET)]),
        dbos_error.DBOSMaxStepRetriesExceeded("model", 3, []),
    ],
    ids=["untyped", "retries of untyped errors", "retries of no error"],
)
def test_anything_else_ends_the_turn_with_an_internal_error(exc: Exception) -> None:
    """No typed error to end with: ``framework_internal_error``, the exception's text kept out."""
    failure = failure_of(exc)
    assert failure.to_body() == internal_error().to_body()
    assert "hunter2" not in str(failure.to_body())
