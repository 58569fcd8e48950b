"""GET /sse: ids are sequences, a resume loses and repeats nothing, pending calls are re-sent."""

from __future__ import annotations

import httpx

from .helpers import Frame, read_sse, start_parked, wait_status


def ids(frames: list[Frame]) -> list[int]:
    return [f.id for f in frames if f.id is not None]


def test_stream_ends_when_the_turn_parks_then_when_it_ends(client: httpx.Client) -> None:
    """A fresh stream replays the turn and ends at the park; after the answer, a stream from
    the last id carries the continuation and ends at turn_end."""
    parked = start_parked(client)
    sid = parked["sessionId"]
    first = read_sse(client, sid)
    assert [f.type for f in first] == ["turn_start", "user_message", "tool_start", "suspended"]
    assert ids(first) == [1, 2, 3, 4]
    assert all(f.data["sessionId"] == sid and f.data["sequence"] == f.id for f in first)
    assert first[2].data["data"]["toolCallId"] == parked["toolCallId"]

    client.post(
        "/submit-tool-result",
        json={
            "sessionId": sid,
            "toolCallId": parked["toolCallId"],
            "result": {"applied": 3, "failed": 0},
        },
    )
    rest = read_sse(client, sid, last_event_id=ids(first)[-1])
    assert [f.type for f in rest if f.id is not None] == [
        "tool_end",
        "text_delta",
        "text",
        "turn_end",
    ]
    assert rest[-1].data["data"]["text"] == "Applied 3 edits."
    assert ids(first) + ids(rest) == list(range(1, len(first) + len(rest) + 1))


def test_resume_from_last_event_id_has_no_gap_and_no_duplicate(client: httpx.Client) -> None:
    """From every point of a finished stream, Last-Event-ID and fromSequence resume exactly
    after it."""
    parked = start_parked(client, 'replace "a" with "b" and publish document d-9')
    sid = parked["sessionId"]
    client.post(
        "/submit-tool-result",
        json={
            "sessionId": sid,
            "toolCallId": parked["toolCallId"],
            "result": {"applied": 1, "failed": 0},
        },
    )
    view = wait_status(client, sid, "suspended_client_tool")
    approval = view["pendingToolCalls"][0]
    client.post(
        "/submit-tool-result",
        json={
            "kind": "approval-response",
            "sessionId": sid,
            "toolCallId": approval["toolCallId"],
            "approvalId": approval["approvalId"],
            "approved": True,
        },
    )
    wait_status(client, sid, "completed")

    full = ids(read_sse(client, sid))
    assert full == list(range(1, len(full) + 1))
    for last in (1, 4, len(full) - 1, len(full)):
        by_header = read_sse(client, sid, last_event_id=last)
        by_query = read_sse(client, sid, from_sequence=last + 1)
        assert full[:last] + ids(by_header) == full
        assert ids(by_query) == ids(by_header)
        # The session waits on nothing: no pending frame on a reconnect.
        assert all(f.id is not None for f in by_header)


def test_reconnect_to_a_parked_session_resends_the_pending_calls(client: httpx.Client) -> None:
    """A reconnect after the tool_start re-sends the waiting calls as a `pending` frame without
    an id, and then ends (still parked)."""
    parked = start_parked(client)
    sid = parked["sessionId"]
    first = read_sse(client, sid)
    again = read_sse(client, sid, last_event_id=ids(first)[-1])
    assert len(again) == 1
    (pending,) = again
    assert pending.id is None and pending.type == "pending"
    calls = pending.data["data"]["toolCalls"]
    assert [c["toolCallId"] for c in calls] == [parked["toolCallId"]]
    assert calls[0]["toolName"] == "editContent" and calls[0]["input"]
    client.post("/interrupt", json={"sessionId": sid})


def test_stream_waits_for_a_turn_that_is_still_running(client: httpx.Client) -> None:
    """Opened right after the answer is stored, the stream stays open until the turn ends."""
    parked = start_parked(client)
    sid = parked["sessionId"]
    client.post(
        "/submit-tool-result",
        json={
            "sessionId": sid,
            "toolCallId": parked["toolCallId"],
            "result": {"applied": 0, "failed": 2},
        },
    )
    frames = read_sse(client, sid, last_event_id=4)
    assert frames[-1].type == "turn_end"
    assert frames[-1].data["data"]["text"] == "Applied 0 edits. 2 edits failed."
