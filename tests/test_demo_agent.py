"""The demo editor never rewrites the document with a message it does not understand: it says
what it understands. `publish` alone publishes the document as it is (after the approval).
The served demo's replies stream word by word."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from helix_dbos.config import HelixSettings
from helix_dbos.core.llm import LLMRequest
from helix_dbos.core.messages import Message, ToolCall
from helix_dbos.demo import SERVED_STREAM_PAUSE_SECONDS, UNDERSTOOD, demo_agents, editor_script
from helix_dbos.runtime import AgentRuntime


def request(*messages: Message) -> LLMRequest:
    return LLMRequest(instructions="", messages=list(messages), session_id="s", run_id="r")


def user(text: str) -> Message:
    return Message(role="user", content=text)


def called(name: str) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=f"c-{name}", name=name)])


def result(name: str, *, value: Any = None, error: str | None = None) -> Message:
    return Message(
        role="tool",
        tool_call_id=f"c-{name}",
        tool_name=name,
        result=value,
        is_error=error is not None,
        content=error or "",
        error_code="approval_denied" if error else None,
    )


def test_a_message_it_does_not_understand_gets_what_it_understands() -> None:
    """No phrase it knows: a reply listing what it understands, and no tool call at all."""
    for text in ("make it shorter", "hi", "replace quikc with quick", ""):
        response = editor_script(request(user(text)))
        assert response.tool_calls == [], text
        assert response.text == UNDERSTOOD
    assert 'replace "old" with "new"' in UNDERSTOOD and "publish" in UNDERSTOOD


def test_publish_alone_publishes_the_document_as_it_is() -> None:
    """`publish` without a replace phrase: no edit, publishDocument (which asks approval)."""
    first = editor_script(request(user("publish")))
    (call,) = first.tool_calls
    assert (call.name, call.input) == ("publishDocument", {"documentId": "doc-1"})
    named = editor_script(request(user("Publish document release-2")))
    assert named.tool_calls[0].input == {"documentId": "release-2"}

    url = "https://docs.example.com/doc-1"
    done = editor_script(
        request(
            user("publish"),
            called("publishDocument"),
            result("publishDocument", value={"published": True, "url": url}),
        )
    )
    assert (done.text, done.tool_calls) == (f"Published the document at {url}.", [])
    denied = editor_script(
        request(
            user("publish"),
            called("publishDocument"),
            result("publishDocument", error="A human denied this call."),
        )
    )
    assert denied.text == "The document was not published: A human denied this call."


def test_a_replace_phrase_naming_publish_only_edits() -> None:
    """`publish` inside a replace phrase is text to edit, not a request to publish."""
    message = 'replace "publish" with "release"'
    (call,) = editor_script(request(user(message))).tool_calls
    assert call.input == {"edits": [{"selector": "publish", "replacement": "release"}]}
    applied = result("editContent", value={"applied": 1, "failed": 0})
    after = editor_script(request(user(message), called("editContent"), applied))
    assert (after.text, after.tool_calls) == ("Applied 1 edit.", [])


@pytest_asyncio.fixture
async def served_demo(tmp_path: Path) -> AsyncIterator[AgentRuntime]:
    """The demo agents as ``helix-dbos serve`` runs them (streaming), on SQLite."""
    settings = HelixSettings(
        database_url=f"sqlite:///{tmp_path / 'demo.sqlite'}",
        executor_id="demo-agent-test",
        application_version="test",
    )
    agents = demo_agents(stream_pause_seconds=SERVED_STREAM_PAUSE_SECONDS)
    async with AgentRuntime(agents, settings) as runtime:
        yield runtime


async def test_publish_alone_streams_then_waits_for_the_approval(
    served_demo: AgentRuntime,
) -> None:
    """`publish` on the served demo: the reply streams in several `text_delta` events, then
    the turn waits on the publishDocument approval; the document is never asked to change."""
    handle = await served_demo.start("editor", "publish")
    (waiting,) = await served_demo.wait_for_pending(handle.session_id)
    assert waiting["toolName"] == "publishDocument" and "approvalId" in waiting
    events = await served_demo.events(handle.session_id)
    deltas = [e.data["delta"] for e in events if e.type == "text_delta"]
    assert len(deltas) >= 3, deltas
    assert "".join(deltas) == "Publishing the document as it is."
    assert not [e for e in events if e.type == "tool_start"]
    await served_demo.interrupt(handle.session_id)


async def test_review_asks_the_reviewer_companion_whose_reply_starts_an_editor_turn(
    tmp_path: Path,
) -> None:
    """`review ...` sends the note to the reviewer companion; its reply comes back as a
    notification and starts an editor turn that relays it."""
    runtime = AgentRuntime(
        demo_agents(),
        HelixSettings(
            database_url=f"sqlite:///{tmp_path / 'demo.sqlite'}",
            executor_id="demo-review",
            application_version="t",
        ),
    )
    await runtime.launch()
    try:
        handle = await runtime.start("editor", "review the opening paragraph")
        assert (await handle.result())["text"] == (
            "The reviewer has it; its reply will appear here."
        )
        said = "The reviewer says: I read your note (3 words). Looks good to me."
        for _ in range(200):
            log = await runtime.messages(handle.session_id)
            if log[-1].content == said:
                break
            await asyncio.sleep(0.05)
        assert log[-1].content == said
        assert "review <anything>" in UNDERSTOOD
    finally:
        await runtime.shutdown()


def test_delete_calls_the_tool_that_needs_two_approvers() -> None:
    """`delete [document <id>]` calls deleteDocument; its result is said in words."""
    (call,) = editor_script(request(user("delete document doc-7"))).tool_calls
    assert (call.name, call.input) == ("deleteDocument", {"documentId": "doc-7"})
    done = editor_script(
        request(
            user("delete document doc-7"),
            called("deleteDocument"),
            result("deleteDocument", value={"deleted": True, "documentId": "doc-7"}),
        )
    )
    assert (done.text, done.tool_calls) == ("Deleted document doc-7.", [])


async def test_the_demo_delete_needs_two_approvers_other_than_the_asker(
    served_demo: AgentRuntime,
) -> None:
    """The demo's deleteDocument: the asker may not approve, one approver is not enough, two
    distinct approvers delete it, and the record names both."""
    from helix_dbos.core import Decider
    from helix_dbos.errors import ApprovalForbiddenError
    from helix_dbos.store.decisions import DecisionQuery, list_decisions

    handle = await served_demo.start("editor", "delete document doc-7", principal="ada")
    (waiting,) = await served_demo.wait_for_pending(handle.session_id)
    assert waiting["toolName"] == "deleteDocument"

    async def approve(who: str) -> Any:
        return await served_demo.submit_tool_result(
            handle.session_id,
            waiting["toolCallId"],
            kind="approval-response",
            approval_id=waiting["approvalId"],
            approved=True,
            decider=Decider(principal=who, credential="hook"),
        )

    try:
        await approve("ada")
    except ApprovalForbiddenError as refused:
        assert refused.code == "approval_self_decision"
    else:
        raise AssertionError("the asker approved its own deletion")
    assert (await approve("ann")).continuation.kind == "awaiting_quorum"
    assert (await approve("bo")).status == "accepted"
    assert (await handle.result())["text"] == "Deleted document doc-7."
    page = await list_decisions(served_demo.store, DecisionQuery(approval_id=waiting["approvalId"]))
    assert [d.principal for d in reversed(page.decisions)] == ["ann", "bo"]
