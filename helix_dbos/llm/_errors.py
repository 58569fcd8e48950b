"""Turning provider failures into ``ProviderError`` with a stable ``provider_*`` code.

Both real adapters share this table so the runtime sees the same codes whichever provider
failed. ``retryable`` is what the durable model step looks at: a retryable error is retried
with backoff by the step, anything else fails the turn with the typed code.

======================== ========= ==================================================
code                     retryable raised for
======================== ========= ==================================================
provider_rate_limit      yes       429, ``rate_limit_error`` (quota exhaustion: no)
provider_overloaded      yes       500, 502, 503, 504, 529, ``overloaded`` anywhere
provider_timeout         yes       timeouts, refused or broken connections, a stream
                                   that stopped before the model finished
provider_auth            no        401, 403
provider_bad_request     no        400, 404, 422 and other 4xx
provider_context_too_long no       the conversation does not fit the model (or 413)
provider_error           yes       other 5xx, an error event inside a stream
======================== ========= ==================================================
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..errors import ProviderError

__all__ = [
    "PROVIDER_RETRYABLE",
    "classify",
    "classify_body",
    "error_fields",
    "incomplete_stream",
    "is_transport_error",
    "transport_error",
]

#: Whether each provider code is worth retrying unchanged.
PROVIDER_RETRYABLE: dict[str, bool] = {
    "provider_rate_limit": True,
    "provider_overloaded": True,
    "provider_timeout": True,
    "provider_auth": False,
    "provider_bad_request": False,
    "provider_context_too_long": False,
    "provider_error": True,
}

_OVERLOADED_STATUSES = frozenset({500, 502, 503, 504, 529})

# Providers and OpenAI-compatible servers word context overflows differently and not all of
# them send a code, so the message is matched too (lower-cased).
_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "context limit",
    "maximum context",
    "prompt is too long",
    "prompt too long",
    "too many input tokens",
)

# The roots of the HTTP stacks the SDKs use; their transport errors are not always wrapped
# by the SDK when they happen while a stream is being read.
_TRANSPORT_MODULES = frozenset({"httpx", "httpx2", "httpcore", "h11", "h2", "anyio"})


def _make(
    code: str, message: str, status: int | None, *, retryable: bool | None = None
) -> ProviderError:
    return ProviderError(
        message,
        code=code,
        retryable=PROVIDER_RETRYABLE[code] if retryable is None else retryable,
        status=status,
    )


def _is_context_overflow(code: str | None, message: str) -> bool:
    text = f"{code or ''} {message}".lower()
    return any(marker in text for marker in _CONTEXT_MARKERS)


def error_fields(body: object) -> tuple[str | None, str | None, str | None]:
    """The ``(type, code, message)`` of a provider error body.

    Accepts the outer ``{"error": {...}}`` envelope or the inner object, since the SDKs hand
    over either depending on where the error came from.

    Args:
        body: the decoded error body, or anything else (then all three are None).

    Returns:
        The error's type, code and human message, each None when absent.
    """
    if not isinstance(body, dict):
        return None, None, None
    inner: Any = body.get("error", body)
    if not isinstance(inner, dict):
        return None, None, inner if isinstance(inner, str) else None

    def text(key: str) -> str | None:
        value = inner.get(key)
        return str(value) if value is not None else None

    return text("type"), text("code"), text("message")


def classify(
    provider: str,
    *,
    status: int | None,
    message: str,
    error_type: str | None = None,
    error_code: str | None = None,
) -> ProviderError:
    """Map one provider failure to a ``ProviderError``.

    Args:
        provider: the provider's display name, for the message ("OpenAI", "Anthropic").
        status: the HTTP status, or None for an error event inside a 200 stream.
        message: the provider's human message.
        error_type: the body's error type (``rate_limit_error``, ``overloaded_error`` ...).
        error_code: the body's error code (``context_length_exceeded``, ``insufficient_quota``).

    Returns:
        The error to raise, with its code, retryability and the provider status.
    """
    kind = (error_type or "").lower()
    code = (error_code or "").lower()
    where = f"{provider} returned {status}" if status is not None else f"{provider} stream error"
    text = f"{where}: {message}" if message else where
    name = _answer_code(status, kind, code, message) or _request_code(status, kind, code, message)
    if name == "provider_rate_limit":
        # An exhausted quota answers 429 too, but waiting does not refill it.
        return _make(name, text, status, retryable="insufficient_quota" not in (kind, code))
    return _make(name, text, status)


def _answer_code(status: int | None, kind: str, code: str, message: str) -> str | None:
    """The code of a failure the provider raised whatever the request was: refused
    credentials, a rate limit or an overload; ``None`` for any other failure.

    ``kind`` and ``code`` are the body's error type and code, lowercased (``""`` when absent).
    """
    if status in (401, 403) or kind in ("authentication_error", "permission_error"):
        return "provider_auth"
    if status == 429 or kind == "rate_limit_error" or code == "rate_limit_exceeded":
        return "provider_rate_limit"
    if (
        status in _OVERLOADED_STATUSES
        or kind in ("overloaded_error", "api_error", "server_error")
        or "overloaded" in f"{kind} {code} {message}".lower()
    ):
        return "provider_overloaded"
    return None


def _request_code(status: int | None, kind: str, code: str, message: str) -> str:
    """The code of any other failure: one of the request (too long, timed out, refused as
    bad) or else the provider's own (``provider_error``).

    ``kind`` and ``code`` are the body's error type and code, lowercased (``""`` when absent).
    """
    if status == 413 or kind == "request_too_large" or _is_context_overflow(code, message):
        # 413 is a byte limit rather than a token one, but the remedy is the same: shorten the
        # conversation; retrying unchanged cannot help.
        return "provider_context_too_long"
    if status == 408 or kind == "timeout_error":
        return "provider_timeout"
    if status is not None and 400 <= status < 500:
        return "provider_bad_request"
    if status is None and kind == "invalid_request_error":
        return "provider_bad_request"
    # Other 5xx, and error events inside a stream that say nothing more: the provider failed
    # after accepting the request, so another attempt may well succeed.
    return "provider_error"


def classify_body(
    provider: str,
    *,
    status: int | None,
    body: object,
    message: str,
    code: str | None = None,
) -> ProviderError:
    """``classify`` an SDK's error: the type, code and message of its ``body``
    (``error_fields``), else the SDK's own ``message`` and ``code``."""
    kind, body_code, body_message = error_fields(body)
    return classify(
        provider,
        status=status,
        message=body_message or message,
        error_type=kind,
        error_code=body_code or code,
    )


def is_transport_error(err: BaseException) -> bool:
    """Whether ``err`` is a network failure rather than a provider answer or a bug.

    Covers Python's own socket and timeout errors and the exceptions of the HTTP libraries the
    SDKs are built on (matched by module so neither library has to be importable here).
    """
    if isinstance(err, TimeoutError | asyncio.TimeoutError | ConnectionError):
        return True
    for cls in type(err).__mro__:
        root = cls.__module__.split(".", 1)[0]
        if root in _TRANSPORT_MODULES and cls.__name__ in (
            "TransportError",
            "TimeoutException",
            "NetworkError",
            "ProtocolError",
            "RemoteProtocolError",
            "ReadError",
            "StreamError",
            "BrokenResourceError",
            "EndOfStream",
            "ClosedResourceError",
            "LocalProtocolError",
        ):
            return True
    return False


def transport_error(provider: str, err: BaseException) -> ProviderError:
    """A retryable ``provider_timeout`` for a timeout or a refused or broken connection.

    A connection that breaks in the middle of a stream lands here too: the model's answer is
    incomplete, and the whole call is safe to run again.
    """
    detail = str(err) or type(err).__name__
    return _make("provider_timeout", f"{provider} connection failed: {detail}", None)


def incomplete_stream(provider: str) -> ProviderError:
    """A retryable ``provider_timeout`` for a stream that ended before the model finished."""
    return _make(
        "provider_timeout",
        f"{provider} stream ended before the model finished its answer",
        None,
    )
