"""Clauses of a submit's checks that need no write (``runtime/_submit/checks.py``), each
found by changing the code and seeing no test fail (docs/invariant-breaks.md, "Mutation
testing")."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from helix_dbos.core.session import args_digest
from helix_dbos.errors import ApprovalMismatchError, PayloadTooLargeError, RequestValidationError
from helix_dbos.runtime._submit.checks import (
    Submission,
    check_shape,
    measure_result_bytes,
    validated_response,
)
from tests.runtime.submit_checks import checks_context, pending_call


@pytest.mark.parametrize("result", ["a\x00b", {"k": "\x00"}, {"\x00": 1}, ["x", ["\x00"]]])
def test_a_result_holding_a_nul_character_is_refused_before_any_read(result: Any) -> None:
    """Postgres text and JSONB cannot hold NUL, so such a result could never be stored: it
    is refused as not JSON, typed, by the shape check (JSON writes the character escaped)."""
    with pytest.raises(ValueError):
        measure_result_bytes(result)
    with pytest.raises(RequestValidationError) as refused:
        check_shape(Submission("s", "t1", result=result), checks_context(1024))
    assert refused.value.details["cause"] == "result_not_json"


def test_a_refused_answer_names_the_call_it_was_for() -> None:
    """The refusals of an answer that does not fit its call carry the call's id as a typed
    field (the AG-UI ``RUN_ERROR`` metadata, a Python caller's ``details``): an answer of the
    wrong kind, either way, an approval for another approval id or for arguments other
    than the call's."""
    client = pending_call("client")
    approval = pending_call(
        "approval", approval_id="r1::t1", args_digest=args_digest("edit", {"text": "x"})
    )
    result = Submission("s", "t1", result=1)
    decision = Submission("s", "t1", kind="approval-response", approval_id="r1::t1", approved=True)
    other = Submission("s", "t1", kind="approval-response", approval_id="r0::t1", approved=True)
    unseen = Submission(
        "s",
        "t1",
        kind="approval-response",
        approval_id="r1::t1",
        approved=True,
        shown_input={"text": "y"},
    )
    for sub, entry, refusal in (
        (result, approval, RequestValidationError),
        (decision, client, RequestValidationError),
        (other, approval, ApprovalMismatchError),
        (unseen, approval, ApprovalMismatchError),
    ):
        with pytest.raises(refusal) as refused:
            validated_response(sub, entry, checks_context(1024), None, None)
        assert refused.value.details["toolCallId"] == "t1"


def test_an_edit_failing_the_tools_input_names_the_tool_and_the_call() -> None:
    """Edited arguments that fail the tool's input schema: the refusal names the tool and the
    call (typed fields), and says the cause."""
    approval = pending_call(
        "approval", approval_id="r1::t1", args_digest=args_digest("edit", {"text": "x"})
    )
    sub = Submission(
        "s", "t1", kind="approval-response", approval_id="r1::t1", approved=True,
        edited_input={"text": 3},
    )  # fmt: skip
    with pytest.raises(RequestValidationError) as refused:
        validated_response(sub, approval, checks_context(1024), EditIn, None)
    assert refused.value.details == {
        "cause": "edited_input",
        "toolName": "edit",
        "toolCallId": "t1",
    }


def test_a_decision_counts_only_its_reason_against_the_size_limit() -> None:
    """An approval decision is stored as its reason, if it gives one: a decision without a
    reason counts nothing against the result size limit (it goes through even a limit of
    0 bytes), and a reason counts its bytes."""
    plain = Submission("s", "t1", kind="approval-response", approval_id="r1::t1", approved=True)
    check_shape(plain, checks_context(0))
    denial = Submission(
        "s", "t1", kind="approval-response", approval_id="r1::t1", approved=False, reason="no"
    )
    check_shape(denial, checks_context(2))
    with pytest.raises(PayloadTooLargeError):
        check_shape(denial, checks_context(1))


class EditIn(BaseModel):
    text: str
