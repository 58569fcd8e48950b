"""Errors raised by helix_dbos, each with a stable string code, ``retryable`` and ``http_status``.

The hierarchy::

    HelixError
    ├── ConfigError                 validation_error      500  the application misconfigured the library
    ├── ToolDefinitionError         validation_error      500  define_tool / define_agent refused a definition
    ├── RequestValidationError      validation_error      400  a submit/resume body is not valid
    ├── InvalidResultError          INVALID_RESULT        400  a result failed the tool's output schema
    ├── ApprovalMismatchError       approval_mismatch     400  an approval for another call or other arguments
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

from typing import Any

__all__ = [
    "CLIENT_TOOL_ERROR_CODES",
    "INVALID_RESULT_MESSAGE",
    "KNOWN_ERROR_CODES",
    "VALIDATION_ERROR_MESSAGE",
    "AgentAlreadyRunningError",
    "AgentNotFoundError",
    "AgentNotResumableError",
    "ApprovalMismatchError",
    "AuthError",
    "ConfigError",
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
]

#: The fixed message of a body that is not a valid submit; it never reveals the schema.
VALIDATION_ERROR_MESSAGE = "The submit is not a valid client-tool answer or approval"
#: The fixed message of a result that failed the tool's output schema.
INVALID_RESULT_MESSAGE = "The submitted result failed the tool output validation"

#: The fixed message of ``store_unavailable``; it never carries the driver's text.
STORE_UNAVAILABLE_MESSAGE = "The session store is unavailable; retry the request shortly"

#: Codes a client-tool result can carry when the framework, not the client, produced it.
CLIENT_TOOL_ERROR_CODES: frozenset[str] = frozenset(
    {
        "client_tool_timeout",
        "client_tool_abandoned",
        "aborted",
        "runtime_restarted",
        "disposed",
        "validation_failed",
        "not_executed",
        "approval_denied",
    }
)

#: Every code the framework itself raises or records.
KNOWN_ERROR_CODES: frozenset[str] = CLIENT_TOOL_ERROR_CODES | frozenset(
    {
        "validation_error",
        "INVALID_RESULT",
        "approval_mismatch",
        "validation_payload_too_large",
        "state_not_found",
        "state_run_superseded",
        "state_not_resumable",
        "state_already_running",
        "state_conflict",
        "state_size_exceeded",
        "unknown_tool_call",
        "framework_agent_not_found",
        "framework_not_supported",
        "framework_cancelled",
        "framework_internal_error",
        "rate_limited",
        "unauthorized",
        "forbidden",
        "schema_not_current",
        "store_unavailable",
        "transport_error",
        "max_steps_exceeded",
        "tool_execution_failed",
        "provider_rate_limit",
        "provider_overloaded",
        "provider_timeout",
        "provider_auth",
        "provider_bad_request",
        "provider_context_too_long",
        "provider_error",
    }
)


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

    code: str = "framework_internal_error"
    http_status: int = 500
    retryable: bool = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

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
    """The application configured the library wrongly (bad URL, bad limit)."""

    code = "validation_error"
    http_status = 500


class ToolDefinitionError(HelixError):
    """``define_tool`` or ``define_agent`` refused a definition."""

    code = "validation_error"
    http_status = 500


class RequestValidationError(HelixError):
    """A request body is not valid; the message is fixed unless verbose errors are on."""

    code = "validation_error"
    http_status = 400


class InvalidResultError(HelixError):
    """A submitted result failed the owning tool's output schema. Nothing was stored."""

    code = "INVALID_RESULT"
    http_status = 400

    def __init__(self, tool_name: str, tool_call_id: str, issues: list[Any] | None = None) -> None:
        super().__init__(INVALID_RESULT_MESSAGE, toolName=tool_name, toolCallId=tool_call_id)
        self.issues = issues or []

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            type(self),
            (self.details["toolName"], self.details["toolCallId"], self.issues),
        )


class ApprovalMismatchError(HelixError):
    """An approval names another call or run, or arguments other than those shown."""

    code = "approval_mismatch"
    http_status = 400


class PayloadTooLargeError(HelixError):
    """A result (or a request body) is over the submit size limit. Nothing was stored."""

    code = "validation_payload_too_large"
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

    code = "state_size_exceeded"
    http_status = 413


class SessionNotFoundError(HelixError):
    """No session has this id."""

    code = "state_not_found"
    http_status = 404


class AgentNotFoundError(HelixError):
    """No agent of this type is registered."""

    code = "framework_agent_not_found"
    http_status = 404


class RunSupersededError(HelixError):
    """A late submit to a run another entry has superseded; nothing was written."""

    code = "state_run_superseded"
    http_status = 409


class AgentNotResumableError(HelixError):
    """The session cannot be resumed in this mode (partial batch, completed, failed ...)."""

    code = "state_not_resumable"
    http_status = 409


class AgentAlreadyRunningError(HelixError):
    """A run of the session is already going; a new entry would race it."""

    code = "state_already_running"
    http_status = 409
    retryable = True


class StaleStateError(HelixError):
    """Compare-and-swap retries on a session row were exhausted."""

    code = "state_conflict"
    http_status = 409
    retryable = True


class NotSupportedError(HelixError):
    """The operation is not supported in this situation."""

    code = "framework_not_supported"
    http_status = 400


class RateLimitedError(HelixError):
    """Too many submits for one session; nothing was stored."""

    code = "rate_limited"
    http_status = 429
    retryable = True


class AuthError(HelixError):
    """The authenticate hook refused the request."""

    code = "unauthorized"
    http_status = 401

    def __init__(self, message: str, *, status: int = 401, code: str | None = None) -> None:
        super().__init__(message)
        self.http_status = status
        self.code = code or ("forbidden" if status == 403 else "unauthorized")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,), {"http_status": self.http_status, "code": self.code})


class SchemaNotCurrentError(HelixError):
    """The session tables are missing or behind; the message names the command to run."""

    code = "schema_not_current"
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
        code: str = "provider_error",
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
