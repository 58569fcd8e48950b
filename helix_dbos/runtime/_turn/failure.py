"""What a failed turn records and streams: a code and a fixed message.

An exception's own text can hold a database driver's SQL and parameters, or a provider's
response body. It never reaches the session row, ``/status`` or a ``turn_end`` event: those
carry the error's code, a fixed message for that code and ``retryable``. The text goes to the
log at most (``turn.error_detail``, through the runtime's scrubber).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

from dbos import error as dbos_error

from ...errors import HelixError
from ...observability.log import log_event
from ..records import TurnError

__all__ = ["FIXED_MESSAGES", "failure_of", "internal_error", "turn_error"]

FIXED_MESSAGES: dict[str, str] = {
    "framework_internal_error": "An internal error ended the turn.",
    "max_steps_exceeded": "The turn used all of its model steps without a final answer.",
    "provider_rate_limit": "The model provider kept rate-limiting the request.",
    "provider_overloaded": "The model provider was overloaded or failing.",
    "provider_timeout": "The model provider did not answer in time.",
    "provider_auth": "The model provider refused the credentials.",
    "provider_bad_request": "The model provider rejected the request.",
    "provider_context_too_long": "The conversation is longer than the model's context window.",
    "provider_error": "The model provider failed.",
    "transport_error": "The connection to the model provider failed.",
    "state_conflict": "The session changed under the turn too often to commit.",
    "state_size_exceeded": "The session's stored state would exceed the store's size limit.",
    "tool_execution_failed": "A tool failed.",
}


def _message(code: str) -> str:
    return FIXED_MESSAGES.get(code, "The turn failed.")


def internal_error() -> HelixError:
    """The error of an unexpected exception: ``framework_internal_error``, nothing revealed."""
    err = HelixError(_message("framework_internal_error"))
    return err


def failure_of(exc: Exception) -> HelixError:
    """The typed error a turn ends with when ``exc`` escaped it: a ``HelixError`` is its own;
    a step that kept failing (``DBOSMaxStepRetriesExceeded``: a retryable provider error,
    say) ends with the last ``HelixError`` it raised; anything else (an adapter bug, a
    tool-less crash) is ``internal_error``, revealing nothing."""
    if isinstance(exc, HelixError):
        return exc
    if isinstance(exc, dbos_error.DBOSMaxStepRetriesExceeded):
        typed = [e for e in exc.errors if isinstance(e, HelixError)]
        return typed[-1] if typed else internal_error()
    return internal_error()


def turn_error(
    exc: BaseException | None,
    code: str,
    *,
    retryable: bool = False,
    session_id: str,
    run_id: str,
    scrubber: Callable[[str], str] | None = None,
) -> TurnError:
    """The session's ``error`` for a failed turn; logs the exception's text (scrubbed)."""
    if exc is not None:
        # The exception and where it was raised (the innermost frames), for the operator.
        where = traceback.extract_tb(exc.__traceback__)[-3:]
        text = f"{type(exc).__name__}: {exc} at " + " < ".join(
            f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}" for f in reversed(where)
        )
        log_event(
            "turn.error_detail",
            sessionId=session_id,
            runId=run_id,
            code=code,
            detail=scrubber(text) if scrubber is not None else text,
        )
    return {"code": code, "message": _message(code), "retryable": retryable}
