"""Whole demo flows driven only through HTTP: start, stream, submit, status."""

from __future__ import annotations

import httpx

from .helpers import Frame, read_sse, start, wait_status


def stream_until_parked(client: httpx.Client, session_id: str, after: int) -> list[Frame]:
    """Read the stream from ``after`` until it ends; the session must then be parked.

    A reconnect (``after`` > 0) that attaches once the turn has parked again replays up to
    ``suspended`` and then sends the ``pending`` frame (no id) of the calls still waiting."""
    frames = read_sse(client, session_id, last_event_id=after)
    types = [f.type for f in frames]
    last = max((i for i, f in enumerate(frames) if f.id is not None), default=-1)
    assert last >= 0 and frames[last].type == "suspended", types
    assert all(f.type == "pending" for f in frames[last + 1 :]), types
    return [f for f in frames if f.id is not None]


def test_editor_round_trip(client: httpx.Client) -> None:
    """start -> the editContent call on the stream -> submit -> completed, "Applied 3 edits."."""
    sid = start(
        client,
        'replace "teh" with "the", replace "recieve" with "receive" and '
        'replace "adress" with "address"',
    )["sessionId"]
    frames = stream_until_parked(client, sid, 0)
    (tool_start,) = [f for f in frames if f.type == "tool_start"]
    data = tool_start.data["data"]
    assert data["toolName"] == "editContent" and data["kind"] == "client"
    assert data["input"]["edits"] == [
        {"selector": "teh", "replacement": "the"},
        {"selector": "recieve", "replacement": "receive"},
        {"selector": "adress", "replacement": "address"},
    ]
    assert (
        wait_status(client, sid, "suspended_client_tool")["pendingToolCalls"][0]["toolCallId"]
        == data["toolCallId"]
    )

    answer = client.post(
        "/submit-tool-result",
        json={
            "sessionId": sid,
            "toolCallId": data["toolCallId"],
            "result": {"applied": 3, "failed": 0, "newVersionId": "v2"},
        },
    )
    assert answer.status_code == 200 and answer.json()["status"] == "accepted", answer.text
    assert answer.json()["continuation"]["kind"] == "new_run"

    view = wait_status(client, sid, "completed")
    assert view["pendingToolCalls"] == []
    rest = read_sse(client, sid, last_event_id=frames[-1].id)
    assert rest[0].type == "tool_end"
    assert rest[0].data["data"]["output"] == {"applied": 3, "failed": 0, "newVersionId": "v2"}
    assert rest[-1].type == "turn_end" and rest[-1].data["data"]["text"] == "Applied 3 edits."


def test_publish_with_approval(client: httpx.Client) -> None:
    """A publish request: the edits, then publishDocument waits for a human; the approval
    (kind approval-response, approvalId from tool_approval_request) runs it."""
    sid = start(client, 'replace "draft" with "final" and publish document doc-7')["sessionId"]
    frames = stream_until_parked(client, sid, 0)
    call_id = next(f for f in frames if f.type == "tool_start").data["data"]["toolCallId"]
    client.post(
        "/submit-tool-result",
        json={"sessionId": sid, "toolCallId": call_id, "result": {"applied": 1, "failed": 0}},
    )

    frames = stream_until_parked(client, sid, frames[-1].id or 0)
    (request,) = [f for f in frames if f.type == "tool_approval_request"]
    data = request.data["data"]
    assert data["toolName"] == "publishDocument"
    assert data["input"] == {"documentId": "doc-7"}
    assert data["approvalId"].endswith(f"::{data['toolCallId']}")
    assert (
        wait_status(client, sid, "suspended_client_tool")["pendingToolCalls"][0]["kind"]
        == "approval"
    )

    forged = client.post(
        "/submit-tool-result",
        json={
            "kind": "approval-response",
            "sessionId": sid,
            "toolCallId": data["toolCallId"],
            "approvalId": data["approvalId"],
            "approved": True,
            "input": {"documentId": "other"},
        },
    )
    assert forged.status_code == 400 and forged.json()["code"] == "approval_mismatch"

    approved = client.post(
        "/submit-tool-result",
        json={
            "kind": "approval-response",
            "sessionId": sid,
            "toolCallId": data["toolCallId"],
            "approvalId": data["approvalId"],
            "approved": True,
            "input": data["input"],
        },
    )
    assert approved.status_code == 200 and approved.json()["status"] == "accepted"
    wait_status(client, sid, "completed")
    rest = read_sse(client, sid, last_event_id=frames[-1].id)
    end = next(f for f in rest if f.type == "tool_end")
    assert end.data["data"]["output"] == {
        "published": True,
        "url": "https://docs.example.com/doc-7",
    }
    assert rest[-1].data["data"]["text"] == (
        "Applied 1 edit. Published the document at https://docs.example.com/doc-7."
    )


def test_publish_denied(client: httpx.Client) -> None:
    """A denial never runs the tool; the model reports it with the reason."""
    sid = start(client, 'replace "a" with "b", then publish')["sessionId"]
    view = wait_status(client, sid, "suspended_client_tool")
    client.post(
        "/submit-tool-result",
        json={
            "sessionId": sid,
            "toolCallId": view["pendingToolCalls"][0]["toolCallId"],
            "result": {"applied": 2, "failed": 0},
        },
    )
    # A stored answer is not waiting, so this is the next park: the approval.
    call = wait_status(client, sid, "suspended_client_tool")["pendingToolCalls"][0]
    assert call["kind"] == "approval"
    denied = client.post(
        "/chat/" + sid + "/submit-tool-result",
        json={
            "kind": "approval-response",
            "toolCallId": call["toolCallId"],
            "approvalId": call["approvalId"],
            "approved": False,
            "reason": "not today",
        },
    )
    assert denied.status_code == 200, denied.text
    wait_status(client, sid, "completed")
    text = read_sse(client, sid)[-1].data["data"]["text"]
    assert text.startswith("Applied 2 edits. The document was not published:")
    assert "not today" in text
