"""Errors raised by helix_dbos, each with a stable code (an ``ErrorCode``), ``retryable`` and ``http_status``.

The hierarchy::

    HelixError
    ├── ConfigError                 config_error          500  the application misconfigured the library
    ├── ToolDefinitionError         config_error          500  define_tool / define_agent refused a definition
    ├── RequestValidationError      validation_error      400  a submit/resume body is not valid
    ├── InvalidResultError          INVALID_RESULT        400  a result failed the tool's output schema
    ├── ApprovalMismatchError       approval_mismatch     400  an approval for another call or other arguments
    ├── ApprovalForbiddenError      approval_self_decision / _not_eligible / _decider_unknown 403
    ├── PayloadTooLargeError        validation_payload_too_large 413
    ├── SessionNotFoundError        state_not_found       404
    ├── AgentNotFoundError          framework_agent_not_found 404
    ├── RunSupersededError          state_run_superseded  409
    ├── AgentNotResumableError      state_not_resumable   409  (retryable while a batch is partial)
    ├── AgentAlreadyRunningError    state_already_running 409
    ├── StaleStateError             state_conflict        409  compare-and-swap retries exhausted
    ├── NotSupportedError           framework_not_supported 400
    ├── RateLimitedError            rate_limited          429
    ├── AuthError                   unauthorized / forbidden 401/403
    ├── SchemaNotCurrentError       schema_not_current    503  migrations have not been run
    ├── StoreUnavailableError       store_unavailable     503  the database is unreachable (retryable)
    └── ProviderError               provider_*            502  an LLM provider failed (see llm/)

Every error pickles through its fields (DBOS pickles exceptions that leave a step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

__all__ = [
    "CLIENT_TOOL_ERROR_CODES",
    "INVALID_RESULT_MESSAGE",
    "KNOWN_ERROR_CODES",
    "VALIDATION_ERROR_MESSAGE",
    "AgentAlreadyRunningError",
    "AgentNotFoundError",
    "AgentNotResumableError",
    "ApprovalForbiddenError",
    "ApprovalMismatchError",
    "AuthError",
    "ConfigError",
    "ErrorCode",
    "HelixError",
    "InvalidResultError",
    "NotSupportedError",
    "PayloadTooLargeError",
    "ProviderError",
    "RateLimitedError",
    "RequestValidationError",
    "RunSupersededError",
    "SchemaNotCurrentError",
    "SessionNotFoundError",
    "STORE_UNAVAILABLE_MESSAGE",
    "StaleStateError",
    "StateSizeExceededError",
    "StoreUnavailableError",
    "ToolDefinitionError",
    "is_client_tool_error_code",
    "is_known_error_code",
    "with_details",
]

#: The fixed message of a body that is not a valid submit; it never reveals the schema.
VALIDATION_ERROR_MESSAGE = "The submit is not a valid client-tool answer or approval"
#: The fixed message of a result that failed the tool's output schema.
INVALID_RESULT_MESSAGE = "The submitted result failed the tool output validation"

#: The fixed message of ``store_unavailable``; it never carries the driver's text.
STORE_UNAVAILABLE_MESSAGE = "The session store is unavailable; retry the request shortly"


class ErrorCode(StrEnum):
    """Every code the framework itself raises or records: one code per meaning.

    Members are strings (``ErrorCode.STATE_NOT_FOUND == "state_not_found"``), so a code read
    back from JSON compares equal to its member. A code is a contract with clients: add new
    ones, never rename one.
    """

    # Client-tool results the framework (not the client) produced.
    CLIENT_TOOL_TIMEOUT = "client_tool_timeout"
    CLIENT_TOOL_ABANDONED = "client_tool_abandoned"
    ABORTED = "aborted"
    RUNTIME_RESTARTED = "runtime_restarted"
    DISPOSED = "disposed"
    VALIDATION_FAILED = "validation_failed"
    NOT_EXECUTED = "not_executed"
    APPROVAL_DENIED = "approval_denied"
    APPROVAL_EXPIRED = "approval_expired"
    # Requests (4xx).
    VALIDATION_ERROR = "validation_error"
    INVALID_RESULT = "INVALID_RESULT"
    APPROVAL_MISMATCH = "approval_mismatch"
    APPROVAL_SELF_DECISION = "approval_self_decision"
    APPROVAL_NOT_ELIGIBLE = "approval_not_eligible"
    APPROVAL_DECIDER_UNKNOWN = "approval_decider_unknown"
    VALIDATION_PAYLOAD_TOO_LARGE = "validation_payload_too_large"
    STATE_NOT_FOUND = "state_not_found"
    STATE_RUN_SUPERSEDED = "state_run_superseded"
    STATE_NOT_RESUMABLE = "state_not_resumable"
    STATE_ALREADY_RUNNING = "state_already_running"
    STATE_CONFLICT = "state_conflict"
    STATE_SIZE_EXCEEDED = "state_size_exceeded"
    UNKNOWN_TOOL_CALL = "unknown_tool_call"
    FRAMEWORK_AGENT_NOT_FOUND = "framework_agent_not_found"
    FRAMEWORK_NOT_SUPPORTED = "framework_not_supported"
    RATE_LIMITED = "rate_limited"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    # The server (5xx) and turns.
    CONFIG_ERROR = "config_error"
    FRAMEWORK_CANCELLED = "framework_cancelled"
    FRAMEWORK_INTERNAL_ERROR = "framework_internal_error"
    SCHEMA_NOT_CURRENT = "schema_not_current"
    STORE_UNAVAILABLE = "store_unavailable"
    FRAMEWORK_TURN_LOST = "framework_turn_lost"
    TRANSPORT_ERROR = "transport_error"
    MAX_STEPS_EXCEEDED = "max_steps_exceeded"
    TOOL_EXECUTION_FAILED = "tool_execution_failed"
    # LLM providers.
    PROVIDER_RATE_LIMIT = "provider_rate_limit"
    PROVIDER_OVERLOADED = "provider_overloaded"
    PROVIDER_TIMEOUT = "provider_timeout"
    PROVIDER_AUTH = "provider_auth"
    PROVIDER_BAD_REQUEST = "provider_bad_request"
    PROVIDER_CONTEXT_TOO_LONG = "provider_context_too_long"
    PROVIDER_ERROR = "provider_error"


#: Codes a client-tool result can carry when the framework, not the client, produced it.
CLIENT_TOOL_ERROR_CODES: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.CLIENT_TOOL_TIMEOUT,
        ErrorCode.CLIENT_TOOL_ABANDONED,
        ErrorCode.ABORTED,
        ErrorCode.RUNTIME_RESTARTED,
        ErrorCode.DISPOSED,
        ErrorCode.VALIDATION_FAILED,
        ErrorCode.NOT_EXECUTED,
        ErrorCode.APPROVAL_DENIED,
        ErrorCode.APPROVAL_EXPIRED,
    }
)

#: Every code the framework itself raises or records.
KNOWN_ERROR_CODES: frozenset[ErrorCode] = frozenset(ErrorCode)


def is_known_error_code(code: object) -> bool:
    """Whether ``code`` is one of the framework's own error codes."""
    return isinstance(code, str) and code in KNOWN_ERROR_CODES


def is_client_tool_error_code(code: object) -> bool:
    """Whether ``code`` is a framework-made client-tool failure (timeout, abandoned, ...)."""
    return isinstance(code, str) and code in CLIENT_TOOL_ERROR_CODES


class HelixError(Exception):
    """Base class of every error helix_dbos raises on purpose.

    Attributes:
        code: the stable string code clients match on.
        retryable: whether the same call may succeed later unchanged.
        http_status: the status the HTTP layer answers with.
        details: extra typed fields that go into the HTTP error body.
    """

    code: str = ErrorCode.FRAMEWORK_INTERNAL_ERROR
    http_status: int = 500
    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool | None = None, **details: Any) -> None:
        """``retryable`` overrides the class's default for this error (a partial batch is
        retryable, a completed session is not); ``details`` go into the HTTP error body."""
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details
        if retryable is not None:
            self.retryable = retryable

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild from the message and fields so the error survives DBOS's pickling.
        return (_rebuild, (type(self), self.message, self.details, self.retryable))

    def to_body(self) -> dict[str, Any]:
        """The typed JSON error body: ``{error, code, retryable, ...details}``."""
        body: dict[str, Any] = {
            "error": self.message,
            "code": self.code,
            "retryable": self.retryable,
        }
        body.update(self.details)
        return body


def with_details(exc: HelixError, **extra: Any) -> HelixError:
    """A new error like ``exc`` (same type, message and ``retryable``) with more details: an
    error is never changed once it is built."""
    return _rebuild(type(exc), exc.message, {**exc.details, **extra}, exc.retryable)


def _rebuild_invalid_result(
    tool_name: str, tool_call_id: str, issues: list[Any], message: str | None, show: bool
) -> InvalidResultError:
    return InvalidResultError(tool_name, tool_call_id, issues, message=message, show_issues=show)


def _rebuild(
    cls: type[HelixError], message: str, details: dict[str, Any], retryable: bool
) -> HelixError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.message = message
    err.details = details
    err.retryable = retryable
    return err


class ConfigError(HelixError):
    """The application configured the library wrongly (bad URL, bad limit): a server error."""

    code = ErrorCode.CONFIG_ERROR
    http_status = 500


class ToolDefinitionError(HelixError):
    """``define_tool`` or ``define_agent`` refused a definition (the application's mistake)."""

    code = ErrorCode.CONFIG_ERROR
    http_status = 500


class RequestValidationError(HelixError):
    """A request body is not valid; the message is fixed unless verbose errors are on."""

    code = ErrorCode.VALIDATION_ERROR
    http_status = 400
    issues: Sequence[Mapping[str, Any]] = ()
    """A body that failed its schema: pydantic's findings, without the input (the HTTP answer
    names their fields, ``field`` and ``fields``; the log says why)."""


class InvalidResultError(HelixError):
    """A submitted result failed the owning tool's output schema. Nothing was stored."""

    code = ErrorCode.INVALID_RESULT
    http_status = 400

    def __init__(
        self,
        tool_name: str,
        tool_call_id: str,
        issues: list[Any] | None = None,
        *,
        message: str | None = None,
        show_issues: bool = False,
    ) -> None:
        """``message`` and ``show_issues`` (the schema's findings in the body) are for
        verbose validation errors only: the default message never reveals the schema."""
        details: dict[str, Any] = {"toolName": tool_name, "toolCallId": tool_call_id}
        if show_issues:
            details["issues"] = issues or []
        super().__init__(message or INVALID_RESULT_MESSAGE, **details)
        self.issues = issues or []
        self._verbose = (message, show_issues)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_invalid_result,
            (self.details["toolName"], self.details["toolCallId"], self.issues, *self._verbose),
        )


class ApprovalMismatchError(HelixError):
    """An approval names another call or run, or arguments other than those shown."""

    code = ErrorCode.APPROVAL_MISMATCH
    http_status = 400


class ApprovalForbiddenError(HelixError):
    """The approval's policy does not let this decider answer it (four eyes, roles, an
    anonymous decider where one must be told apart). Nothing was stored."""

    code: str = ErrorCode.APPROVAL_SELF_DECISION
    http_status = 403

    def __init__(self, message: str, code: str | None = None, **details: Any) -> None:
        super().__init__(message, **details)
        if code is not None:
            self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.code), {"details": self.details})


class PayloadTooLargeError(HelixError):
    """A result (or a request body) is over the submit size limit. Nothing was stored."""

    code = ErrorCode.VALIDATION_PAYLOAD_TOO_LARGE
    http_status = 413

    def __init__(self, cause: str, limit_bytes: int, size_bytes: int | None) -> None:
        details: dict[str, Any] = {"cause": cause, "limitBytes": limit_bytes}
        if size_bytes is not None:
            details["sizeBytes"] = size_bytes
        super().__init__(
            f"The {'tool result' if cause == 'tool_result' else 'request body'} is "
            f"larger than the limit of {limit_bytes} bytes",
            **details,
        )


class StateSizeExceededError(HelixError):
    """An answer would push the stored pending map over the store's limit. Nothing was stored."""

    code = ErrorCode.STATE_SIZE_EXCEEDED
    http_status = 413


class SessionNotFoundError(HelixError):
    """No session has this id."""

    code = ErrorCode.STATE_NOT_FOUND
    http_status = 404


class AgentNotFoundError(HelixError):
    """No agent of this type is registered."""

    code = ErrorCode.FRAMEWORK_AGENT_NOT_FOUND
    http_status = 404


class RunSupersededError(HelixError):
    """A late submit to a run another entry has superseded; nothing was written."""

    code = ErrorCode.STATE_RUN_SUPERSEDED
    http_status = 409


class AgentNotResumableError(HelixError):
    """The session cannot be resumed in this mode (partial batch, completed, failed ...)."""

    code = ErrorCode.STATE_NOT_RESUMABLE
    http_status = 409


class AgentAlreadyRunningError(HelixError):
    """A run of the session is already going; a new entry would race it."""

    code = ErrorCode.STATE_ALREADY_RUNNING
    http_status = 409
    retryable = True


class StaleStateError(HelixError):
    """Compare-and-swap retries on a session row were exhausted."""

    code = ErrorCode.STATE_CONFLICT
    http_status = 409
    retryable = True


class NotSupportedError(HelixError):
    """The operation is not supported in this situation."""

    code = ErrorCode.FRAMEWORK_NOT_SUPPORTED
    http_status = 400


class RateLimitedError(HelixError):
    """Too many submits for one session; nothing was stored."""

    code = ErrorCode.RATE_LIMITED
    http_status = 429
    retryable = True


class AuthError(HelixError):
    """The authenticate hook refused the request."""

    code: str = ErrorCode.UNAUTHORIZED
    http_status = 401

    def __init__(self, message: str, *, status: int = 401, code: str | None = None) -> None:
        super().__init__(message)
        self.http_status = status
        self.code = code or (ErrorCode.FORBIDDEN if status == 403 else ErrorCode.UNAUTHORIZED)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,), {"http_status": self.http_status, "code": self.code})


class SchemaNotCurrentError(HelixError):
    """The session tables are missing or behind; the message names the command to run."""

    code = ErrorCode.SCHEMA_NOT_CURRENT
    http_status = 503


class StoreUnavailableError(HelixError):
    """The database is unreachable for now (down, restarting, connections dropped).

    Nothing about the request was wrong and nothing of it was lost: the same request may be
    sent again unchanged once the database is back. The message is fixed; the driver's text
    (which can hold SQL and its parameters) goes to the log at most. ``retryAfterSeconds``
    (also the HTTP ``Retry-After`` header) says when to try again.
    """

    code = "store_unavailable"
    http_status = 503
    retryable = True

    #: Seconds a client should wait before retrying, unless told otherwise.
    DEFAULT_RETRY_AFTER = 2

    def __init__(self, *, retry_after: int = DEFAULT_RETRY_AFTER) -> None:
        super().__init__(STORE_UNAVAILABLE_MESSAGE, retryAfterSeconds=retry_after)

    @property
    def retry_after(self) -> int:
        """Seconds to wait before retrying."""
        return int(self.details["retryAfterSeconds"])


class ProviderError(HelixError):
    """An LLM provider call failed; ``code`` is one of the ``provider_*`` codes."""

    http_status = 502

    def __init__(
        self,
        message: str,
        *,
        code: str = ErrorCode.PROVIDER_ERROR,
        retryable: bool = False,
        status: int | None = None,
    ) -> None:
        super().__init__(message, providerStatus=status)
        self.code = code
        self.retryable = retryable

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_provider,
            (self.message, self.code, self.retryable, self.details.get("providerStatus")),
        )


def _rebuild_provider(
    message: str, code: str, retryable: bool, status: int | None
) -> ProviderError:
    return ProviderError(message, code=code, retryable=retryable, status=status)
