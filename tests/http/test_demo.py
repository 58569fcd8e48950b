"""The demo editor's script, without a server: edits from the message, outcomes in words."""

from __future__ import annotations

from typing import Any

from helix_dbos.core.llm import LLMRequest
from helix_dbos.core.messages import Message, ToolCall
from helix_dbos.demo import demo_agents, editor_script, edits_for


def request(*messages: Message) -> LLMRequest:
    return LLMRequest(instructions="", messages=list(messages), session_id="s", run_id="r")


def tool(name: str, *, result: Any = None, error: str | None = None) -> Message:
    return Message(
        role="tool",
        tool_call_id=f"c-{name}",
        tool_name=name,
        result=result,
        is_error=error is not None,
        content=error or "",
        error_code="client_tool_timeout" if error else None,
    )


def called(name: str) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=f"c-{name}", name=name)])


def test_edits_come_from_the_message() -> None:
    """Each `replace "a" with "b"` is one edit; a message without one asks for no edit."""
    assert edits_for("replace \"a\" with \"b\" and replace 'c' with ''") == [
        {"selector": "a", "replacement": "b"},
        {"selector": "c", "replacement": ""},
    ]
    assert edits_for("  make it shorter ") == []


def test_a_user_message_calls_edit_content() -> None:
    """The first step asks the client to apply the edits."""
    response = editor_script(request(Message(role="user", content='replace "x" with "y"')))
    (call,) = response.tool_calls
    assert call.name == "editContent"
    assert call.input == {"edits": [{"selector": "x", "replacement": "y"}]}


def test_failures_are_reported_in_words() -> None:
    """A client error or a timeout ends the turn with what happened; nothing is published."""
    user = Message(role="user", content="fix it and publish")
    timed_out = tool("editContent", error="The client did not answer in time.")
    text = editor_script(request(user, called("editContent"), timed_out)).text
    assert (
        text == "The edits were not applied: The client did not answer in time. Nothing "
        "was published."
    )
    applied = tool("editContent", result={"applied": 2, "failed": 1})
    denied = tool("publishDocument", error="A human denied this call.")
    final = editor_script(
        request(user, called("editContent"), applied, called("publishDocument"), denied)
    )
    assert final.text == (
        "Applied 2 edits. 1 edit failed. The document was not published: A human denied this call."
    )
    assert not final.tool_calls


def test_demo_agents() -> None:
    """demo_agents() is the editor with its client tool, its approval-gated server tools (one
    of them needs two approvers, neither the asker) and its companion, the reviewer (which
    wakes it with its replies)."""
    (editor,) = demo_agents()
    assert editor.name == "editor"
    edit, publish, delete, *companion_tools = editor.tools
    assert edit.execution == "client" and edit.output_model is not None
    assert publish.execution == "server" and publish.require_approval
    assert delete.require_approval and delete.approval_policy == {"fourEyes": True, "quorum": 2}
    assert [t.name for t in companion_tools] == [
        "companion__sendMessage",
        "companion__status",
        "companion__end",
    ]
    (reviewer,) = editor.companions
    assert reviewer.name == "reviewer" and reviewer.agent.persistent and reviewer.wake_parent
