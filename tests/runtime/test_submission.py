"""The checks of a submit that need no write (``runtime/_submit/checks.py``): its shape and size
before anything is read, and its answer validated against the call it answers."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from helix_dbos.core.session import PendingCall, args_digest
from helix_dbos.errors import (
    ApprovalMismatchError,
    InvalidResultError,
    PayloadTooLargeError,
    RequestValidationError,
)
from helix_dbos.runtime._submit.checks import (
    MISSING,
    Submission,
    check_shape,
    measure_result_bytes,
    validated_response,
)
from tests.runtime.submit_checks import checks_context, pending_call


class Out(BaseModel):
    applied: int


class In(BaseModel):
    text: str


def _approval() -> PendingCall:
    return pending_call(
        "approval", approval_id="r1::t1", args_digest=args_digest("edit", {"text": "x"})
    )


def _refusal(exc: pytest.ExceptionInfo[Any]) -> str:
    return str(exc.value.details.get("cause"))


@pytest.mark.parametrize(
    ("sub", "cause"),
    [
        (Submission("s", "t1"), "result_or_error"),
        (Submission("s", "t1", result=1, error="also"), "result_or_error"),
        (Submission("s", "t1", error="nul\x00"), "error_not_text"),
        (Submission("s", "t1", result=float("nan")), "result_not_json"),
        (Submission("s", "t1", result={"x": object()}), "result_not_json"),
        (Submission("s", "t1", kind="approval-response", approved=True), "approval_fields"),
    ],
)
def test_a_malformed_submit_is_refused_by_its_shape(sub: Submission, cause: str) -> None:
    with pytest.raises(RequestValidationError) as exc:
        check_shape(sub, checks_context())
    assert _refusal(exc) == cause


def test_the_size_limit_counts_a_result_an_error_and_a_reason_alike() -> None:
    """The measure is the compact JSON's UTF-8 bytes; an error string and a denial's reason
    count against the same limit (each is stored, streamed and shown to the model)."""
    assert measure_result_bytes({"a": "é"}) == len('{"a":"é"}'.encode())
    check_shape(Submission("s", "t1", result="x" * 62), checks_context(64))  # 64 bytes with quotes
    for sub in (
        Submission("s", "t1", result="x" * 63),
        Submission("s", "t1", error="e" * 65),
        Submission("s", "t1", kind="approval-response", approval_id="a", approved=False,
                   reason="r" * 65),
    ):  # fmt: skip
        with pytest.raises(PayloadTooLargeError):
            check_shape(sub, checks_context(64))
    assert Submission("s", "t1").result is MISSING  # ``None`` is a valid result


def test_a_result_is_validated_against_the_tools_output() -> None:
    sub = Submission("s", "t1", result={"applied": "no"})
    with pytest.raises(InvalidResultError):
        validated_response(sub, pending_call(), checks_context(), In, Out)
    ok = Submission("s", "t1", result={"applied": 1})
    assert validated_response(ok, pending_call(), checks_context(), In, Out) == {
        "result": {"applied": 1}
    }


def test_an_error_is_stored_scrubbed_and_needs_no_schema() -> None:
    sub = Submission("s", "t1", error="secret token")
    scrub = checks_context(scrubber=lambda text: text.replace("secret", "[redacted]"))
    assert validated_response(sub, pending_call(), scrub, None, None) == {
        "error": "[redacted] token"
    }


def test_an_answer_of_the_wrong_kind_is_refused() -> None:
    with pytest.raises(RequestValidationError):
        validated_response(Submission("s", "t1", result=1), _approval(), checks_context(), In, Out)
    decision = Submission("s", "t1", kind="approval-response", approval_id="r1::t1", approved=True)
    with pytest.raises(RequestValidationError):
        validated_response(decision, pending_call(), checks_context(), In, Out)


def test_an_approval_is_bound_to_its_id_and_the_arguments_shown() -> None:
    def decide(**fields: Any) -> dict[str, Any]:
        sub = Submission("s", "t1", kind="approval-response", **fields)
        return validated_response(sub, _approval(), checks_context(), In, Out)

    with pytest.raises(ApprovalMismatchError):
        decide(approval_id="r0::t1", approved=True)
    with pytest.raises(ApprovalMismatchError):
        decide(approval_id="r1::t1", approved=True, shown_input={"text": "other"})
    assert decide(approval_id="r1::t1", approved=True, shown_input={"text": "x"}) == {
        "approved": True
    }
    assert decide(approval_id="r1::t1", approved=False, reason="no") == {
        "approved": False,
        "reason": "no",
    }


def test_edited_arguments_come_with_an_approval_and_fit_the_tools_input() -> None:
    def decide(approved: bool, edited: dict[str, Any]) -> dict[str, Any]:
        sub = Submission(
            "s", "t1", kind="approval-response", approval_id="r1::t1", approved=approved,
            edited_input=edited,
        )  # fmt: skip
        return validated_response(sub, _approval(), checks_context(), In, Out)

    with pytest.raises(RequestValidationError):
        decide(False, {"text": "y"})
    with pytest.raises(RequestValidationError) as exc:
        decide(True, {"text": 3})
    assert _refusal(exc) == "edited_input"
    assert decide(True, {"text": "y"}) == {"approved": True, "editedInput": {"text": "y"}}
