"""Turning a suspended call's stored answer (or its absence) into its tool result."""

from __future__ import annotations

from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helix_dbos.core.session import CallKind
from helix_dbos.runtime._turn.resolve import (
    _approval_answer,
    _client_answer,
    call_outcome,
    child_result,
    end_fields,
    resolve_call,
)
from helix_dbos.runtime.records import ToolCallRef, ToolResult, TurnOutcome
from tests.support.builders import REGISTERED_AT, WAIT_MS, pending_call
from tests.support.strategies import json_values

DEADLINE = REGISTERED_AT + WAIT_MS
REF: ToolCallRef = {"toolCallId": "call_1", "toolName": "edit"}


def entry(kind: CallKind = "client", **fields: Any) -> dict[str, Any]:
    """A pending entry as stored (camelCase JSON)."""
    return pending_call("call_1", kind=kind, **fields).dump()


def answered(kind: CallKind, response: dict[str, Any], after_ms: int = 250) -> dict[str, Any]:
    return entry(kind, submitted_at=REGISTERED_AT + after_ms, response=response)


def test_a_missing_entry_was_never_executed() -> None:
    """The entry is gone (a stop cleared it): ``not_executed``, no wait."""
    assert resolve_call(REF, None, abandon=False) == {
        "toolCallId": "call_1",
        "toolName": "edit",
        "suspended": True,
        "ok": False,
        "errorCode": "not_executed",
        "outcome": "not_executed",
        "waitMs": 0,
    }


@given(json_values)
def test_a_client_result_is_passed_through(value: Any) -> None:
    """Whatever JSON the client sent (``null`` included) is the result; the wait is measured
    from registration to the stored answer."""
    result = resolve_call(REF, answered("client", {"result": value}), abandon=False)
    assert result["ok"] is True
    assert result["result"] == value
    assert (result["outcome"], result["waitMs"], result["deadlineAt"]) == (
        "answered",
        250,
        DEADLINE,
    )


def test_a_client_error_is_a_failed_result_without_a_code() -> None:
    """The client's own error text; no framework code (the client said it, not the runtime)."""
    result = resolve_call(REF, answered("client", {"error": "disk full"}), abandon=False)
    assert result["ok"] is False
    assert (result["error"], result["errorCode"], result["outcome"]) == (
        "disk full",
        None,
        "answered",
    )


def test_an_answer_wins_over_abandon() -> None:
    """A call answered before the new message keeps its answer."""
    result = resolve_call(REF, answered("client", {"result": 1}), abandon=True)
    assert (result["ok"], result["outcome"]) == (True, "answered")


def test_an_unanswered_call_is_abandoned_by_a_new_message() -> None:
    """Abandoned, not expired, even when its deadline passed too."""
    result = resolve_call(REF, entry(on_timeout={"action": "result", "result": 1}), abandon=True)
    assert result["ok"] is False
    assert (result["outcome"], result["errorCode"], result["waitMs"]) == (
        "abandoned",
        "client_tool_abandoned",
        0,
    )


def test_a_denied_approval_says_why() -> None:
    """A refusal is ``approval_denied``; the human's reason is appended when given."""
    plain = resolve_call(REF, answered("approval", {"approved": False}), abandon=False)
    assert plain["ok"] is False
    assert (plain["errorCode"], plain["error"]) == ("approval_denied", "A human denied this call.")
    reasoned = resolve_call(
        REF, answered("approval", {"approved": False, "reason": "too much"}), abandon=False
    )
    assert reasoned["error"] == "A human denied this call. Reason: too much"


def test_an_approved_call_runs_with_its_input_or_the_edit() -> None:
    """No ``ok`` yet (the tool's run says); ``runInput`` is the stored input unless the human
    edited it, and an edit to ``{}`` is an edit."""
    plain = resolve_call(REF, answered("approval", {"approved": True}), abandon=False)
    assert "ok" not in plain
    assert plain["runInput"] == {"text": "x"}
    edited = answered("approval", {"approved": True, "editedInput": {"text": "y"}})
    assert resolve_call(REF, edited, abandon=False)["runInput"] == {"text": "y"}
    emptied = answered("approval", {"approved": True, "editedInput": {}})
    assert resolve_call(REF, emptied, abandon=False)["runInput"] == {}


@pytest.mark.parametrize(
    ("kind", "policy", "expected"),
    [
        ("client", None, {"ok": False, "onTimeout": "error", "errorCode": "client_tool_timeout"}),
        ("approval", None, {"ok": False, "onTimeout": "error", "errorCode": "client_tool_timeout"}),
        ("approval", {"action": "deny"}, {"ok": False, "onTimeout": "deny"}),
        ("approval", {"action": "approve"}, {"onTimeout": "approve", "runInput": {"text": "x"}}),
        ("client", {"action": "result", "result": [1]}, {"ok": True, "onTimeout": "result"}),
    ],
)
def test_an_expired_call_follows_the_policy_it_parked_under(
    kind: CallKind, policy: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    """``outcome: timeout``, the full wait, and what the recorded policy makes of the lapse."""
    result = resolve_call(REF, entry(kind, on_timeout=policy), abandon=False)
    assert (result["outcome"], result["waitMs"], result["deadlineAt"]) == (
        "timeout",
        WAIT_MS,
        DEADLINE,
    )
    for key, value in expected.items():
        assert result[key] == value  # type: ignore[literal-required]
    if policy == {"action": "deny"}:
        assert result["errorCode"] == "approval_expired"
    if policy is not None and policy["action"] == "result":
        assert result["result"] == [1]
    if policy is not None and policy["action"] == "approve":
        assert "ok" not in result


def test_a_client_answer_adds_its_result_or_its_error() -> None:
    """The client's error wins over a result sent with it; no error, the result (``null``
    when none was sent)."""
    assert _client_answer({"error": "disk full", "result": 1}) == {
        "ok": False,
        "error": "disk full",
        "errorCode": None,
    }
    assert _client_answer({"result": [1]}) == {"ok": True, "result": [1]}
    assert _client_answer({}) == {"ok": True, "result": None}


def test_an_approval_answer_adds_a_denial_or_the_input_to_run() -> None:
    """A denial (a missing ``approved`` is one), with the reason when given; an approval adds
    only ``runInput``: the edit if there is one, else the call's stored input."""
    call = {"input": {"text": "x"}}
    assert _approval_answer({}, call) == {
        "ok": False,
        "error": "A human denied this call.",
        "errorCode": "approval_denied",
    }
    assert _approval_answer({"approved": False, "reason": "no"}, call)["error"] == (
        "A human denied this call. Reason: no"
    )
    assert _approval_answer({"approved": True}, call) == {"runInput": {"text": "x"}}
    edited = {"approved": True, "editedInput": {"text": "y"}}
    assert _approval_answer(edited, call) == {"runInput": {"text": "y"}}


@pytest.mark.parametrize(
    ("kind", "response", "rest"),
    [
        ("client", {"result": 1}, ["ok", "result"]),
        ("client", {"error": "no"}, ["ok", "error", "errorCode"]),
        ("approval", {"approved": False}, ["ok", "error", "errorCode"]),
        ("approval", {"approved": True}, ["runInput"]),
    ],
)
def test_an_answered_result_starts_with_the_same_fields(
    kind: CallKind, response: dict[str, Any], rest: list[str]
) -> None:
    """Every answered call's result has the same fields first, in one order (the order it is
    recorded and streamed in), then what its answer adds."""
    result = resolve_call(REF, answered(kind, response), abandon=False)
    common = ["toolCallId", "toolName", "suspended", "deadlineAt", "outcome", "waitMs"]
    assert list(result) == [*common, *rest]
    assert (result["outcome"], result["waitMs"], result["deadlineAt"]) == (
        "answered",
        250,
        DEADLINE,
    )


def test_resolving_is_pure() -> None:
    """The same entry resolves the same way twice, and the entry is not changed (it runs in
    transactions that may be retried)."""
    stored = answered("approval", {"approved": True, "editedInput": {"text": "y"}})
    before = {**stored, "response": dict(stored["response"])}
    first = resolve_call(REF, stored, abandon=False)
    assert resolve_call(REF, stored, abandon=False) == first
    assert stored == before


def result_of(**fields: Any) -> ToolResult:
    return {"toolCallId": "call_1", "toolName": "edit", "ok": True, **fields}  # type: ignore[typeddict-item]


def test_how_a_wait_ended() -> None:
    """``answered``, ``denied``, ``expired`` (whatever the policy), ``abandoned``; a call that
    never waited, or never ran, has no outcome."""
    assert call_outcome(result_of()) is None
    assert call_outcome(result_of(suspended=True, outcome="answered")) == "answered"
    denied = result_of(suspended=True, outcome="answered", errorCode="approval_denied")
    assert call_outcome(denied) == "denied"
    assert call_outcome(result_of(suspended=True, outcome="timeout")) == "expired"
    assert call_outcome(result_of(suspended=True, outcome="abandoned")) == "abandoned"
    assert call_outcome(result_of(suspended=True, outcome="not_executed")) is None


def test_end_fields_of_a_tool_end_event() -> None:
    """The outcome, and for an expiry the policy applied (``error`` when none was recorded)."""
    assert end_fields(result_of()) == {}
    assert end_fields(result_of(suspended=True, outcome="answered")) == {"outcome": "answered"}
    expired = result_of(suspended=True, outcome="timeout", onTimeout="approve")
    assert end_fields(expired) == {"outcome": "expired", "onTimeout": "approve"}
    bare = result_of(suspended=True, outcome="timeout")
    assert end_fields(bare) == {"outcome": "expired", "onTimeout": "error"}


@given(
    kind=st.sampled_from(["client", "approval"]),
    answer=st.sampled_from(
        [None, {"result": 1}, {"error": "e"}, {"approved": True}, {"approved": False}]
    ),
    policy=st.sampled_from([None, {"action": "deny"}, {"action": "approve"}, {"action": "result"}]),
    abandon=st.booleans(),
)
def test_every_resolution_has_a_known_outcome(
    kind: CallKind, answer: dict[str, Any] | None, policy: dict[str, Any] | None, abandon: bool
) -> None:
    """Whatever is stored: a suspended result of the same call, an outcome the stream knows,
    and either ``ok`` or (approved, or expired under ``approve``) a ``runInput`` to run."""
    stored = entry(
        kind,
        submitted_at=None if answer is None else REGISTERED_AT + 1,
        response=answer,
        on_timeout=policy,
    )
    result = resolve_call(REF, stored, abandon=abandon)
    assert (result["toolCallId"], result["toolName"], result["suspended"]) == (
        "call_1",
        "edit",
        True,
    )
    assert result["outcome"] in ("answered", "timeout", "abandoned")
    assert ("ok" in result) != ("runInput" in result)
    assert call_outcome(result) in ("answered", "denied", "expired", "abandoned")
    assert result["waitMs"] >= 0


def test_a_sub_agents_outcome_is_its_calls_result() -> None:
    """Completed: its text and output; stopped: ``aborted``; failed: its error's code."""

    def outcome(kind: Any, **fields: Any) -> TurnOutcome:
        base: dict[str, Any] = {"runId": "r", "text": "", "output": None, "error": None}
        return cast(TurnOutcome, {**base, "outcome": kind, **fields})

    done = child_result(outcome("completed", text="hi", output={"a": 1}))
    assert done == {"ok": True, "result": {"text": "hi", "output": {"a": 1}}}
    assert child_result(outcome("stopped"))["errorCode"] == "aborted"
    error: Any = {"code": "max_steps_exceeded", "message": "x"}
    assert child_result(outcome("failed", error=error)) == {
        "ok": False,
        "error": "The sub-agent failed: x",
        "errorCode": "max_steps_exceeded",
    }
