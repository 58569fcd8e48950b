"""The ``not_executed`` results that pair a conversation's unanswered tool calls."""

from __future__ import annotations

from helix_dbos.core.humanize import humanize_client_tool_error
from helix_dbos.core.messages import Message, ToolCall
from helix_dbos.core.pairing import not_executed_results, unpaired_tool_calls


def _asks(*calls: tuple[str, str]) -> Message:
    return Message(
        role="assistant", tool_calls=[ToolCall(id=tcid, name=name) for tcid, name in calls]
    )


def _answer(tcid: str, name: str) -> Message:
    return Message(role="tool", tool_call_id=tcid, tool_name=name, content="done")


def test_each_unanswered_call_gets_one_not_executed_result_in_the_calls_order() -> None:
    """Answered calls get nothing; the others a failed result naming the call and the tool."""
    history = [
        Message(role="user", content="go"),
        _asks(("c1", "search"), ("c2", "editContent")),
        _answer("c1", "search"),
        Message(role="user", content="and then"),
        _asks(("c3", "search")),
    ]

    assert unpaired_tool_calls(history) == [("c2", "editContent"), ("c3", "search")]
    healed = not_executed_results(history)

    assert [(m.tool_call_id, m.tool_name) for m in healed] == [
        ("c2", "editContent"),
        ("c3", "search"),
    ]
    for m in healed:
        assert m.role == "tool" and m.is_error and m.error_code == "not_executed"
        assert m.content == humanize_client_tool_error("not_executed", m.tool_name or "")
        assert "was not executed" in m.content and f"'{m.tool_name}'" in m.content
    # Paired, the conversation has nothing left to heal.
    assert not_executed_results(history + healed) == []


def test_a_conversation_without_open_calls_needs_no_results() -> None:
    """No calls, or every call answered: nothing is added."""
    assert not_executed_results([]) == []
    assert not_executed_results([_asks(("c1", "t")), _answer("c1", "t")]) == []
