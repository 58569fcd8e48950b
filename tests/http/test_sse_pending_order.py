"""GET /sse on a reconnect: the `pending` frame comes after the events the stream replays, so a
client shows a turn's calls after the message that led to them (the demo page's second turn)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from helix_dbos.http.sse import event_stream

from .conftest import HttpServer
from .helpers import Frame, read_sse, start, start_parked, wait_status


def parse(raw: bytes) -> list[Frame]:
    """The frames of a raw event stream (comments left out)."""
    frames: list[Frame] = []
    for block in raw.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            event_id = int(fields["id"]) if "id" in fields else None
            frames.append(Frame(event_id, json.loads(fields["data"])))
    return frames


def finish_first_turn(client: httpx.Client) -> tuple[str, dict[str, Any], int]:
    """A first turn, answered and ended: its session, its parked view, its last sequence."""
    parked = start_parked(client, 'replace "a" with "b"')
    sid = parked["sessionId"]
    parked_view = wait_status(client, sid, "suspended_client_tool")
    suspended_at = max(f.id or 0 for f in read_sse(client, sid))
    answer = {"applied": 1, "failed": 0}
    body = {"sessionId": sid, "toolCallId": parked["toolCallId"], "result": answer}
    assert client.post("/submit-tool-result", json=body).status_code == 200
    wait_status(client, sid, "completed")
    return sid, parked_view, suspended_at


def test_a_second_turn_replays_its_message_before_the_pending_calls(
    client: httpx.Client,
) -> None:
    """Attached after the second turn parked, from the first turn's last event: the replay
    (user message first) comes before the `pending` frame, which ends the stream."""
    sid, _, _ = finish_first_turn(client)
    last = max(f.id or 0 for f in read_sse(client, sid))
    start(client, 'replace "b" with "c"', sessionId=sid)
    view = wait_status(client, sid, "suspended_client_tool")

    frames = read_sse(client, sid, last_event_id=last)

    types = [f.type for f in frames]
    assert types == ["turn_start", "user_message", "tool_start", "suspended", "pending"], types
    assert frames[1].data["data"]["text"] == 'replace "b" with "c"'
    assert [f.id for f in frames] == [last + 1, last + 2, last + 3, last + 4, None]
    (call,) = frames[-1].data["data"]["toolCalls"]
    assert call["toolCallId"] == view["pendingToolCalls"][0]["toolCallId"]
    assert call["toolCallId"] == frames[2].data["data"]["toolCallId"]
    assert client.post("/interrupt", json={"sessionId": sid}).status_code == 200


def test_no_pending_frame_for_calls_the_replay_shows_closed(
    client: httpx.Client, http_server: HttpServer
) -> None:
    """A status view read while the call waited, and a replay that carries its answer and the
    turn's end: the stream sends no `pending` frame for that closed call."""
    sid, parked_view, suspended_at = finish_first_turn(client)

    async def stream() -> bytes:
        chunks = event_stream(
            http_server.runtime, sid, suspended_at, resend_pending=True, view=parked_view
        )
        return b"".join([chunk async for chunk in chunks])

    frames = parse(http_server.run(stream()))

    assert [f.type for f in frames] == ["tool_end", "text_delta", "text", "turn_end"]
    assert all(f.id is not None for f in frames)
