"""Messages and tool calls: the stored row form round-trips, and only what differs is stored."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from helix_dbos.core.messages import Message, ToolCall
from tests.support.strategies import json_objects, json_values

tool_calls = st.builds(
    ToolCall, id=st.text(min_size=1), name=st.text(min_size=1), input=json_objects
)
messages = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "tool", "system"]),
    content=st.text(),
    tool_calls=st.lists(tool_calls, max_size=3),
    tool_call_id=st.none() | st.text(),
    tool_name=st.none() | st.text(),
    result=json_values,
    is_error=st.booleans(),
    error_code=st.none() | st.text(),
    meta=st.none() | json_objects,
)


#: Every field with a default, and the default.
DEFAULTS: dict[str, Any] = {
    "content": "",
    "tool_calls": [],
    "tool_call_id": None,
    "tool_name": None,
    "result": None,
    "is_error": False,
    "error_code": None,
    "meta": None,
}


@given(messages)
def test_a_row_round_trips_and_stores_no_default(message: Message) -> None:
    """``from_row(role, to_row())`` gives the message back, whatever it holds, and the row
    leaves out every default (the conversation log stays small)."""
    row = message.to_row()
    assert Message.from_row(message.role, row) == message
    for key, default in DEFAULTS.items():
        assert key not in row or row[key] != default


def test_the_row_form_of_a_tool_result() -> None:
    """A tool message stores its call, tool, result and error fields under snake_case keys."""
    message = Message(
        role="tool",
        content="failed",
        tool_call_id="c1",
        tool_name="edit",
        is_error=True,
        error_code="client_tool_timeout",
    )
    assert message.to_row() == {
        "role": "tool",
        "content": "failed",
        "tool_call_id": "c1",
        "tool_name": "edit",
        "is_error": True,
        "error_code": "client_tool_timeout",
    }


def test_the_stored_role_wins_over_the_content() -> None:
    """``from_row`` takes the role from its column, not from the JSON."""
    assert Message.from_row("assistant", {"role": "user", "content": "x"}).role == "assistant"


def test_bad_rows_are_refused() -> None:
    """An unknown role or a call without an id does not validate."""
    with pytest.raises(ValidationError):
        Message.from_row("robot", {"content": "x"})
    with pytest.raises(ValidationError):
        Message.from_row("assistant", {"tool_calls": [{"name": "edit"}]})


def test_a_tool_call_is_frozen() -> None:
    """A call is a value: it can be hashed into sets only if nothing reassigns it."""
    call = ToolCall(id="c1", name="edit")
    assert call.input == {}
    with pytest.raises(ValidationError):
        setattr(call, "name", "other")  # noqa: B010 (the assignment is what is refused)
