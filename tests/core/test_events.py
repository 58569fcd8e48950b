"""Session events: the record a turn appends (``event``) and its wire form (``SessionEvent``)."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import ValidationError

from helix_dbos.core.events import EventType, SessionEvent, event


def test_event_puts_its_fields_under_data() -> None:
    """``event`` is ``{"type", "data"}`` with no sequence: the store assigns it."""
    assert event("tool_end", toolCallId="c1", ok=True) == {
        "type": "tool_end",
        "data": {"toolCallId": "c1", "ok": True},
    }
    assert event("turn_start") == {"type": "turn_start", "data": {}}


def test_dump_is_the_wire_form() -> None:
    """camelCase ids, ``sequence`` always (it is the SSE id), unset ids left out."""
    full = SessionEvent(sequence=7, type="text", run_id="run_1", session_id="ses_1", data={"a": 1})
    assert full.dump() == {
        "sequence": 7,
        "type": "text",
        "runId": "run_1",
        "sessionId": "ses_1",
        "data": {"a": 1},
    }
    assert SessionEvent(type="turn_start").dump() == {
        "sequence": 0,
        "type": "turn_start",
        "data": {},
    }


def test_data_is_not_shared_between_events() -> None:
    """Each event gets its own ``data`` dict (a mutable default would leak between events)."""
    first, second = SessionEvent(type="text"), SessionEvent(type="text")
    first.data["x"] = 1
    assert second.data == {}


def test_a_stored_row_builds_the_event() -> None:
    """A row read back with its snake_case columns validates; a row without a type does not."""
    row = {"sequence": 3, "type": "text", "run_id": "run_1", "data": {"text": "hi"}}
    assert SessionEvent.model_validate(row).dump()["runId"] == "run_1"
    with pytest.raises(ValidationError):
        SessionEvent.model_validate({"sequence": 3})


def test_event_types_are_pinned() -> None:
    """Clients switch on these names: one renamed or removed breaks them."""
    assert set(get_args(EventType)) == {
        "turn_start",
        "text",
        "text_delta",
        "tool_start",
        "tool_approval_counted",
        "tool_end",
        "tool_approval_request",
        "tool_deadline_near",
        "suspended",
        "turn_end",
        "user_message",
        "session_healed",
        "rewound",
        "companion_message",
    }
