"""Row markers: which conversation rows are a run's own input, and which are notifications."""

from __future__ import annotations

from helix_dbos.core.markers import (
    SUB_AGENT_COMPLETION_SOURCE,
    entry_input_run,
    is_input_row,
    is_sub_agent_notification,
    mark_entry_input,
    sub_agent_notification,
)
from helix_dbos.core.messages import Message, Role


def user(content: str = "hi", meta: dict[str, object] | None = None) -> Message:
    return Message(role="user", content=content, meta=meta)


def test_marking_copies_the_row_and_keeps_other_markers() -> None:
    """The original row is untouched; the copy carries ``entryInput.runId`` and its old keys."""
    original = user(meta={"restoredFrom": "cp_1"})
    marked = mark_entry_input(original, "run_1")
    assert marked.meta == {"restoredFrom": "cp_1", "entryInput": {"runId": "run_1"}}
    assert original.meta == {"restoredFrom": "cp_1"}
    assert entry_input_run(marked) == "run_1"
    assert entry_input_run(mark_entry_input(marked, "run_2")) == "run_2"


def test_entry_input_run_reads_only_a_well_formed_marker() -> None:
    """No meta, another key, or a marker that is not an object: no run."""
    assert entry_input_run(user()) is None
    assert entry_input_run(user(meta={"source": "x"})) is None
    assert entry_input_run(user(meta={"entryInput": "run_1"})) is None
    assert entry_input_run(user(meta={"entryInput": {}})) is None


def test_a_notification_is_never_input() -> None:
    """A sub-agent's completion notice is a user row the model reads, never a retry's input,
    even when something marked it as an entry's input."""
    notice = sub_agent_notification("The child finished.", "ses_1.call_1")
    assert notice.role == "user"
    assert notice.meta == {"source": SUB_AGENT_COMPLETION_SOURCE, "childSessionId": "ses_1.call_1"}
    assert is_sub_agent_notification(notice)
    assert not is_input_row(notice)
    assert not is_input_row(mark_entry_input(notice, "run_1"))


def test_input_rows_are_marked_or_legacy_user_rows() -> None:
    """A marked user row is input; an unmarked one is input only when it has no markers at
    all (rows from before the marker existed; a restore's ``restoredFrom`` does not count)."""
    assert is_input_row(mark_entry_input(user(), "run_1"))
    assert is_input_row(user())
    assert is_input_row(user(meta={}))
    assert is_input_row(user(meta={"restoredFrom": "cp_1"}))
    assert not is_input_row(user(meta={"childSessionId": "ses_1.c"}))


def test_only_user_rows_are_input() -> None:
    """Assistant, tool and system rows are never input, marked or not."""
    roles: tuple[Role, ...] = ("assistant", "tool", "system")
    for role in roles:
        row = Message(role=role, content="x")
        assert not is_input_row(row)
        assert not is_input_row(mark_entry_input(row, "run_1"))
