"""Provider failures as ``ProviderError`` (``llm/_errors.py``): one code per meaning, whichever
provider failed, and ``retryable`` only where an unchanged retry can succeed."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helix_dbos.errors import ErrorCode
from helix_dbos.llm._errors import (
    PROVIDER_RETRYABLE,
    classify,
    error_fields,
    incomplete_stream,
    is_transport_error,
    transport_error,
)


@pytest.mark.parametrize(
    ("status", "error_type", "error_code", "message", "expected"),
    [
        (401, None, None, "bad key", "provider_auth"),
        (403, None, None, "", "provider_auth"),
        (None, "authentication_error", None, "", "provider_auth"),
        (429, None, None, "slow down", "provider_rate_limit"),
        (None, "rate_limit_error", None, "", "provider_rate_limit"),
        (400, None, "rate_limit_exceeded", "", "provider_rate_limit"),
        (500, None, None, "", "provider_overloaded"),
        (529, "overloaded_error", None, "", "provider_overloaded"),
        (None, None, None, "The engine is currently Overloaded", "provider_overloaded"),
        (400, None, "context_length_exceeded", "", "provider_context_too_long"),
        (400, None, None, "prompt is too long: 210000 tokens", "provider_context_too_long"),
        (413, None, None, "", "provider_context_too_long"),
        (408, None, None, "", "provider_timeout"),
        (None, "timeout_error", None, "", "provider_timeout"),
        (400, "invalid_request_error", None, "bad tool schema", "provider_bad_request"),
        (404, None, None, "no such model", "provider_bad_request"),
        (422, None, None, "", "provider_bad_request"),
        (None, "invalid_request_error", None, "", "provider_bad_request"),
        (501, None, None, "", "provider_error"),
        (None, None, None, "", "provider_error"),
    ],
)
def test_classify_maps_each_failure_to_its_code(
    status: int | None, error_type: str | None, error_code: str | None, message: str, expected: str
) -> None:
    """The table of the module's docstring, row by row, with the code's retryability."""
    err = classify(
        "P", status=status, message=message, error_type=error_type, error_code=error_code
    )
    assert err.code == expected
    assert err.retryable is PROVIDER_RETRYABLE[expected]
    assert err.details == {"providerStatus": status}


def test_an_exhausted_quota_is_a_rate_limit_not_worth_retrying() -> None:
    """A 429 for a spent quota: waiting does not refill it."""
    for kind, code in [("insufficient_quota", None), (None, "insufficient_quota")]:
        err = classify("OpenAI", status=429, message="quota", error_type=kind, error_code=code)
        assert (err.code, err.retryable) == ("provider_rate_limit", False)


def test_the_message_names_the_provider_and_what_it_said() -> None:
    """``<provider> returned <status>: <message>``, or ``stream error`` without a status."""
    assert classify("OpenAI", status=400, message="nope").message == "OpenAI returned 400: nope"
    assert classify("Anthropic", status=None, message="").message == "Anthropic stream error"


@given(
    status=st.none() | st.integers(min_value=100, max_value=599),
    error_type=st.none() | st.text(max_size=20),
    error_code=st.none() | st.text(max_size=20),
    message=st.text(max_size=40),
)
def test_every_failure_gets_a_provider_code(
    status: int | None, error_type: str | None, error_code: str | None, message: str
) -> None:
    """Whatever a provider answers: one of the seven codes (each a known ``ErrorCode``) with
    that code's retryability (an exhausted quota excepted), the status kept, and a refused
    credential or a 429 always said as such, whatever the body."""
    err = classify(
        "P", status=status, message=message, error_type=error_type, error_code=error_code
    )
    assert err.code in PROVIDER_RETRYABLE and err.code in set(ErrorCode)
    quota = "insufficient_quota" in ((error_type or "").lower(), (error_code or "").lower())
    if not (err.code == "provider_rate_limit" and quota):
        assert err.retryable is PROVIDER_RETRYABLE[err.code]
    assert err.details == {"providerStatus": status}
    if status in (401, 403):
        assert err.code == "provider_auth"
    elif status == 429:
        assert err.code == "provider_rate_limit"


def test_error_fields_reads_either_envelope() -> None:
    """``{"error": {...}}`` or the inner object; values become text; absent ones are None."""
    inner = {"type": "invalid_request_error", "code": 400, "message": "bad"}
    assert error_fields({"error": inner}) == ("invalid_request_error", "400", "bad")
    assert error_fields(inner) == ("invalid_request_error", "400", "bad")
    assert error_fields({"error": {"message": "m"}}) == (None, None, "m")


def test_error_fields_of_other_bodies() -> None:
    """A bare string error is the message; anything else gives nothing."""
    assert error_fields({"error": "quota exceeded"}) == (None, None, "quota exceeded")
    assert error_fields({"error": None}) == (None, None, None)
    assert error_fields({"error": [1]}) == (None, None, None)
    assert error_fields("text") == (None, None, None)
    assert error_fields(None) == (None, None, None)


class TransportError(Exception):
    """Stands for ``httpx.TransportError`` (matched by module and name)."""


class ReadTimeout(TransportError):
    """A subclass, as ``httpx.ReadTimeout`` is."""


TransportError.__module__ = "httpx._exceptions"
ReadTimeout.__module__ = "httpx._exceptions"


class NotTransport(Exception):
    """A bug's exception, in a module of ours."""


def test_transport_errors_are_recognised_by_their_roots() -> None:
    """The stdlib's timeouts and connection errors, and the HTTP stacks' transport errors
    (also through a subclass); not an exception of another module or name."""
    assert is_transport_error(TimeoutError())
    assert is_transport_error(ConnectionRefusedError())
    assert is_transport_error(ReadTimeout("read timed out"))
    assert not is_transport_error(NotTransport())
    assert not is_transport_error(ValueError("TransportError"))
    shadow = type("TransportError", (Exception,), {"__module__": "myapp.http"})
    assert not is_transport_error(shadow())


def test_a_broken_connection_or_stream_is_a_retryable_timeout() -> None:
    """Both are ``provider_timeout``, retryable, with no provider status."""
    broken = transport_error("OpenAI", ConnectionResetError())
    assert (broken.code, broken.retryable) == ("provider_timeout", True)
    assert broken.message == "OpenAI connection failed: ConnectionResetError"
    assert transport_error("OpenAI", TimeoutError("slow")).message.endswith(": slow")
    cut = incomplete_stream("Anthropic")
    assert (cut.code, cut.retryable, cut.details) == (
        "provider_timeout",
        True,
        {"providerStatus": None},
    )


def test_a_classified_error_survives_pickling() -> None:
    """DBOS pickles a step's exception: code, retryability and status come back."""
    err = classify("P", status=429, message="slow")
    back = pickle.loads(pickle.dumps(err))
    assert (back.code, back.retryable, back.details, back.message) == (
        err.code,
        err.retryable,
        err.details,
        err.message,
    )
