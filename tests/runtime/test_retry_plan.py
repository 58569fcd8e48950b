"""The retry's plan, step by step (``runtime/_operations/retry_plan.py``): pure, no database."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from helix_dbos.core.markers import entry_input_run, mark_entry_input, sub_agent_notification
from helix_dbos.core.messages import Message, ToolCall
from helix_dbos.core.session import PendingCall, SessionState
from helix_dbos.errors import RequestValidationError
from helix_dbos.runtime._operations.retry_plan import (
    again,
    checkpoint_tail,
    committed_steps,
    drained,
    given,
    own_input_index,
    plan_checkpoint_retry,
    plan_failed_run_retry,
    plan_retry,
    rerun_input,
    stashed_message,
)
from helix_dbos.runtime.records import STASH_KEY
from helix_dbos.store.history import LogRow
from tests.support.builders import REGISTERED_AT, pending_call

FAILED = "run_failed"
NEW = "run_new"


def row(message_id: int, message: Message, run_id: str | None = FAILED) -> LogRow:
    return LogRow(message_id=message_id, message=message, run_id=run_id, rewound_at=None)


def user(text: str, run_id: str | None = FAILED) -> Message:
    """A user row marked as ``run_id``'s input (unmarked when ``run_id`` is ``None``)."""
    message = Message(role="user", content=text)
    return mark_entry_input(message, run_id) if run_id else message


def assistant(text: str = "", calls: tuple[str, ...] = ()) -> Message:
    return Message(
        role="assistant", content=text, tool_calls=[ToolCall(id=c, name="edit") for c in calls]
    )


def state(
    pending: Sequence[PendingCall] = (), metadata: dict[str, Any] | None = None
) -> SessionState:
    return SessionState(
        session_id="s",
        agent_type="a",
        root_session_id="s",
        status="failed",
        run_id=FAILED,
        pending={p.tool_call_id: p for p in pending},
        metadata=metadata or {},
    )


def shape(items: list[LogRow | Message]) -> list[Any]:
    """Kept rows by id, new rows by ``(role, content, the run they are input of)``."""
    return [
        i.message_id if isinstance(i, LogRow) else (i.role, i.content, entry_input_run(i))
        for i in items
    ]


def error_code(item: LogRow | Message) -> str | None:
    """A new tool row's error code."""
    assert isinstance(item, Message) and item.role == "tool"
    return item.error_code


# -- the steps --------------------------------------------------------------------------------


def test_the_run_s_own_input_is_found_by_its_marker_the_last_one() -> None:
    """Found by the failed run's marker: not another run's input, not an unmarked row, not a
    notification; the last marked one wins."""
    live = [
        row(1, user("old", "run_old"), "run_old"),
        row(2, user("first")),
        row(3, user("second")),
        row(4, sub_agent_notification("child done", "child")),
        row(5, user("legacy", None)),
    ]
    assert own_input_index(live, FAILED) == 2
    assert own_input_index(live, "run_other") is None
    assert own_input_index([], FAILED) is None


def test_committed_steps_are_the_run_s_own_assistant_rows() -> None:
    live = [row(1, user("hi")), row(2, assistant("x"), "run_old")]
    assert not committed_steps(live, FAILED)
    assert committed_steps([*live, row(3, assistant("y"))], FAILED)


def test_the_stashed_message_is_read_from_a_dict_only() -> None:
    assert stashed_message(state(metadata={STASH_KEY: {"message": "later"}})) == "later"
    assert stashed_message(state(metadata={STASH_KEY: "not a stash"})) is None
    assert stashed_message(state()) is None


def test_a_rerun_input_is_the_given_message_or_the_row_again() -> None:
    original = row(7, user("hi"))
    replaced = rerun_input(original, NEW, "instead")
    assert (replaced.content, entry_input_run(replaced)) == ("instead", NEW)
    assert replaced == given("instead", NEW)
    copy = rerun_input(original, NEW, None)
    assert copy == again(original, NEW)
    assert (copy.content, entry_input_run(copy)) == ("hi", NEW)
    assert copy.meta is not None and copy.meta["restoredFrom"] == 7


def test_drained_results_cover_only_open_calls_unanswered_ones_not_executed() -> None:
    live = [row(1, user("hi")), row(2, assistant(calls=("c1", "c2", "c3")))]
    live.append(row(3, Message(role="tool", tool_call_id="c3", tool_name="edit", content="{}")))
    answered = pending_call(
        "c1", index=0, submitted_at=REGISTERED_AT + 5, response={"result": {"v": 1}}
    )
    unanswered = pending_call("c2", index=1)
    closed = pending_call("c3", index=2)
    out = drained(state([unanswered, closed, answered]), live)
    assert [(m.tool_call_id, m.is_error, m.error_code) for m in out] == [
        ("c1", False, None),
        ("c2", True, "not_executed"),
    ]
    assert out[0].result == {"v": 1}


def test_the_checkpoint_tail_keeps_notifications_and_reruns_the_first_input() -> None:
    later = [
        row(3, assistant("a")),
        row(4, sub_agent_notification("child done", "child")),
        row(5, user("first")),
        row(6, user("second")),
    ]
    tail = checkpoint_tail(later, later[2], NEW, None)
    assert shape(tail) == [4, ("user", "first", NEW)]
    only_notes = checkpoint_tail(later[:2], None, NEW, "go")
    assert shape(only_notes) == [4, ("user", "go", NEW)]


# -- the plans --------------------------------------------------------------------------------


def test_a_checkpoint_retry_skips_non_user_rows_as_its_trigger() -> None:
    """The first user input after the checkpoint is re-run; a notification before it is kept,
    never taken as input."""
    target = [row(1, user("hi")), row(2, assistant("hello"))]
    live = [
        *target,
        row(3, sub_agent_notification("child done", "child")),
        row(4, user("again")),
        row(5, assistant("bye")),
    ]
    plan = plan_checkpoint_retry(live, target, NEW, None)
    assert shape(plan.desired) == [1, 2, 3, ("user", "again", NEW)]
    assert plan.batch is None and not plan.ended


def test_a_checkpoint_retry_with_nothing_to_rerun_needs_a_message() -> None:
    target = [row(1, user("hi")), row(2, assistant("a", calls=("c1",)))]
    live = [*target, row(3, sub_agent_notification("child done", "child"))]
    with pytest.raises(RequestValidationError) as raised:
        plan_checkpoint_retry(live, target, NEW, None)
    assert raised.value.details["cause"] == "message"
    plan = plan_checkpoint_retry(live, target, NEW, "go")
    # The open call is healed before the tail.
    assert shape(plan.desired)[:2] == [1, 2]
    assert error_code(plan.desired[2]) == "not_executed"
    assert shape(plan.desired)[3:] == [3, ("user", "go", NEW)]


def test_a_run_without_steps_reruns_its_own_input_with_the_rows_after_it() -> None:
    """Rules 2 and 4: the log is kept up to the run's own input, which is re-appended."""
    live = [
        row(1, user("old", "run_old"), "run_old"),
        row(2, assistant("ok"), "run_old"),
        row(3, user("hi")),
        row(4, sub_agent_notification("child done", "child")),
    ]
    plan = plan_failed_run_retry(state(), live, NEW, None)
    assert shape(plan.desired) == [1, 2, ("user", "hi", NEW), 4]
    replaced = plan_failed_run_retry(state(), live, NEW, "instead")
    assert shape(replaced.desired) == [1, 2, ("user", "instead", NEW), 4]


def test_drained_results_come_before_the_rerun_input() -> None:
    """Rule 6: answered calls still pending are drained before the input, never after it."""
    live = [
        row(1, user("old", "run_old"), "run_old"),
        row(2, assistant(calls=("c1",)), "run_old"),
        row(3, user("hi")),
    ]
    plan = plan_failed_run_retry(state([pending_call("c1", run_id="run_old")]), live, NEW, None)
    assert shape(plan.desired)[:2] == [1, 2]
    assert error_code(plan.desired[2]) == "not_executed"
    assert shape(plan.desired)[3:] == [("user", "hi", NEW)]


def test_a_run_that_committed_steps_needs_a_message() -> None:
    """Rule 3: everything is kept and the message is the new input."""
    live = [row(1, user("hi")), row(2, assistant("partial"))]
    with pytest.raises(RequestValidationError) as raised:
        plan_failed_run_retry(state(), live, NEW, None)
    assert raised.value.details == {"cause": "message", "runId": FAILED}
    plan = plan_failed_run_retry(state(), live, NEW, "next")
    assert shape(plan.desired) == [1, 2, ("user", "next", NEW)]


def test_a_stashed_message_is_drained_after_the_answers() -> None:
    """Rule 5: the stored answers first, then the stash's message (a given one replaces it)."""
    live = [row(1, user("hi")), row(2, assistant(calls=("c1",)))]
    stashed = state([pending_call("c1", run_id=FAILED)], metadata={STASH_KEY: {"message": "later"}})
    plan = plan_failed_run_retry(stashed, live, NEW, None)
    assert shape(plan.desired)[:2] == [1, 2]
    assert error_code(plan.desired[2]) == "not_executed"
    assert shape(plan.desired)[3:] == [("user", "later", NEW)]
    replaced = plan_failed_run_retry(stashed, live, NEW, "instead")
    assert shape(replaced.desired)[3:] == [("user", "instead", NEW)]


def test_plan_retry_reads_only_rows_still_in_the_conversation() -> None:
    gone = LogRow(message_id=2, message=user("gone"), run_id=FAILED, rewound_at=datetime.now(UTC))
    rows = [row(1, user("old", "run_old"), "run_old"), gone]
    with pytest.raises(RequestValidationError):
        plan_retry(state(), rows, NEW, None, [rows[0]])
    plan = plan_retry(state(), [*rows, row(3, user("hi"))], NEW, None, None)
    assert shape(plan.desired) == [1, ("user", "hi", NEW)]
