"""A session's row as data: stored forms, a batch's readiness, a stop's tombstones, digests."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helix_dbos.core.session import (
    Continuation,
    PendingCall,
    SessionState,
    SubmitAnswer,
    Tombstone,
    args_digest,
    batch_of,
    is_batch_ready_at_last_submit,
    stop_pending,
    unanswered,
)
from tests.support.builders import REGISTERED_AT, WAIT_MS, pending_call, session_state
from tests.support.strategies import json_objects, json_values

DEADLINE = REGISTERED_AT + WAIT_MS

# -- stored forms ----------------------------------------------------------------------------


def test_a_pending_call_is_stored_in_camel_case_without_nulls() -> None:
    """The JSON the runbook's SQL reads: camelCase keys, unset optional fields left out."""
    entry = pending_call("c1", kind="approval", args_digest="d")
    assert entry.dump() == {
        "toolCallId": "c1",
        "toolName": "edit",
        "input": {"text": "x"},
        "runId": "run_1",
        "kind": "approval",
        "index": 0,
        "deadlineAt": DEADLINE,
        "registeredAt": REGISTERED_AT,
        "completedRetentionMs": 86_400_000,
        "approvalId": "run_1::c1",
        "argsDigest": "d",
    }


def test_stored_forms_read_back() -> None:
    """A pending call, a tombstone and a whole row read back from their stored JSON."""
    entry = pending_call("c1", submitted_at=REGISTERED_AT + 5, response={"result": [1]})
    assert PendingCall.model_validate(entry.dump()) == entry
    stone = Tombstone(
        completed_at=5, outcome="answered", run_id="r", owner_session_id="s", retention_ms=1
    )
    assert stone.dump()["ownerSessionId"] == "s"
    assert Tombstone.model_validate(stone.dump()) == stone
    state = session_state(pending={"c1": entry}, completed={"c0": stone}, status="running")
    assert SessionState.model_validate(state.model_dump(mode="json")) == state


def test_a_pending_call_refuses_an_unknown_kind() -> None:
    """Only ``client`` and ``approval`` calls park a turn."""
    with pytest.raises(ValueError, match="kind"):
        PendingCall.model_validate({**pending_call().dump(), "kind": "server"})


def test_lapsed_by_includes_the_deadline_itself() -> None:
    """A call has lapsed at its deadline, not only after it."""
    entry = pending_call()
    assert not entry.lapsed_by(DEADLINE - 1)
    assert entry.lapsed_by(DEADLINE)
    assert entry.lapsed_by(DEADLINE + 1)


def test_is_root() -> None:
    """A session is a root when its root is itself."""
    assert session_state("ses_1").is_root
    assert not session_state("ses_1.c1", root="ses_1").is_root


# -- what a submit answers -------------------------------------------------------------------


def test_a_submit_answer_on_the_wire() -> None:
    """camelCase, unset parts left out, the process-local fields never sent."""
    accepted = SubmitAnswer(
        status="accepted",
        continuation=Continuation(kind="new_run", run_id="run_2"),
        owner_workflow_id="wf",
        continued_here=True,
    )
    assert accepted.dump() == {
        "status": "accepted",
        "continuation": {"kind": "new_run", "runId": "run_2"},
    }
    unknown = SubmitAnswer(status="unknown_tool_call", reason="run_stopped", tool_call_id="c1")
    assert unknown.dump() == {
        "status": "unknown_tool_call",
        "reason": "run_stopped",
        "toolCallId": "c1",
    }
    assert Continuation(kind="awaiting_batch").dump() == {"kind": "awaiting_batch"}
    assert "owner_workflow_id" not in accepted.model_dump()


# -- a batch -------------------------------------------------------------------------------


def test_batch_of_keeps_one_run_in_the_model_order() -> None:
    """Calls of other runs are left out; the order is ``index``, not insertion."""
    pending = {
        "b": pending_call("b", index=1),
        "x": pending_call("x", run_id="run_0", index=0),
        "a": pending_call("a", index=0),
        "c": pending_call("c", index=2),
    }
    assert [p.tool_call_id for p in batch_of(pending, "run_1")] == ["a", "b", "c"]
    assert batch_of(pending, "run_9") == []


def test_unanswered_are_the_calls_without_a_stored_answer() -> None:
    """Answered means ``submittedAt`` is set, whatever the answer says."""
    answered = pending_call("a", submitted_at=REGISTERED_AT, response={"error": "no"})
    waiting = pending_call("b", index=1)
    assert unanswered([answered, waiting]) == [waiting]


def test_a_batch_is_ready_when_every_call_is_answered() -> None:
    """All answered: ready, whatever the deadlines."""
    batch = [
        pending_call("a", submitted_at=REGISTERED_AT + 1),
        pending_call("b", index=1, submitted_at=REGISTERED_AT + 2),
    ]
    assert is_batch_ready_at_last_submit(batch)


def test_readiness_is_judged_at_the_last_submit_not_later() -> None:
    """An unanswered call counts only if it had lapsed when the last answer came: a reader's
    later clock never makes a batch ready."""
    waiting = pending_call("b", index=1)
    early = pending_call("a", submitted_at=DEADLINE - 1)
    at_deadline = pending_call("a", submitted_at=DEADLINE)
    assert not is_batch_ready_at_last_submit([early, waiting])
    assert is_batch_ready_at_last_submit([at_deadline, waiting])


def test_a_batch_with_no_answer_is_never_ready() -> None:
    """Even when every call has lapsed: the deadline path, not a submit, ends that batch."""
    assert not is_batch_ready_at_last_submit([])
    assert not is_batch_ready_at_last_submit([pending_call("a"), pending_call("b", index=1)])


submit_times = st.none() | st.integers(min_value=REGISTERED_AT, max_value=DEADLINE + WAIT_MS)


@given(st.lists(submit_times, min_size=1, max_size=6))
def test_readiness_matches_its_rule(times: list[int | None]) -> None:
    """Ready iff some call was answered and, at the latest answer, every other call had
    lapsed; the order of the calls does not matter."""
    batch = [pending_call(f"c{i}", index=i, submitted_at=t) for i, t in enumerate(times)]
    answered = [t for t in times if t is not None]
    expected = bool(answered) and all(t is not None or max(answered) >= DEADLINE for t in times)
    assert is_batch_ready_at_last_submit(batch) == expected
    assert is_batch_ready_at_last_submit(list(reversed(batch))) == expected


# -- a stop ------------------------------------------------------------------------------------


def test_a_stop_clears_the_owner_and_leaves_stopped_tombstones_on_the_root() -> None:
    """Every pending call goes; its ownership entry goes; a ``stopped`` tombstone with the
    call's own retention takes its place. Calls of other sessions are not touched."""
    root = session_state("ses_1", ownership={"c1": "ses_1.k", "c2": "ses_1.k", "o": "ses_1"})
    child = session_state(
        "ses_1.k",
        root="ses_1",
        pending={
            "c1": pending_call("c1", run_id="run_k", completed_retention_ms=5),
            "c2": pending_call("c2", run_id="run_k", index=1),
        },
    )
    cleared = stop_pending(child, root, at_ms=42)
    assert sorted(p.tool_call_id for p in cleared) == ["c1", "c2"]
    assert child.pending == {}
    assert root.ownership == {"o": "ses_1"}
    assert root.completed["c1"] == Tombstone(
        completed_at=42,
        outcome="stopped",
        run_id="run_k",
        owner_session_id="ses_1.k",
        retention_ms=5,
    )
    assert root.completed["c2"].outcome == "stopped"


def test_a_stop_may_run_again() -> None:
    """A retried transaction runs it again: the second run clears nothing more."""
    root = session_state("ses_1", ownership={"c1": "ses_1"})
    root.pending["c1"] = pending_call("c1")
    assert len(stop_pending(root, root, at_ms=1)) == 1
    before = root.model_copy(deep=True)
    assert stop_pending(root, root, at_ms=2) == []
    assert root == before


# -- the approval digest ---------------------------------------------------------------------


def test_the_digest_is_sha256_of_the_canonical_call() -> None:
    """Pinned: ``[name, input]`` as compact JSON with sorted keys; stored approvals are
    checked against it after a deploy."""
    canonical = b'["pay",{"amount":1,"to":"bob"}]'
    assert args_digest("pay", {"to": "bob", "amount": 1}) == hashlib.sha256(canonical).hexdigest()


@given(json_objects)
def test_the_digest_ignores_key_order(value: dict[str, Any]) -> None:
    """The same arguments in another key order are the same approval."""
    reordered = dict(reversed(list(value.items())))
    assert args_digest("t", reordered) == args_digest("t", value)


@given(json_values, json_values)
def test_the_digest_binds_name_and_input(a: Any, b: Any) -> None:
    """Another tool, or other arguments, is another digest."""
    assert args_digest("t", a) != args_digest("u", a)
    if a != b:
        assert args_digest("t", a) != args_digest("t", b)
