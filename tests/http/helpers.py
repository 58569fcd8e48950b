"""HTTP-only helpers: start a demo session, read its SSE stream, poll its status."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

TYPED_KEYS = ("error", "code", "retryable")
#: A message the demo editor answers with an editContent call (it parks the turn).
EDIT = 'replace "intro" with "opening"'


@dataclass(frozen=True)
class Frame:
    """One SSE frame: its ``id`` (``None`` for a frame without one) and its JSON data."""

    id: int | None
    data: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.data.get("type"))


def read_sse(
    client: httpx.Client,
    session_id: str,
    *,
    prefix: str = "",
    last_event_id: int | str | None = None,
    from_sequence: int | None = None,
    headers: dict[str, str] | None = None,
    params: dict[str, Any] | None = None,
) -> list[Frame]:
    """Read the session's stream until the server ends it; every frame, in order."""
    query: dict[str, Any] = {"sessionId": session_id, **(params or {})}
    if from_sequence is not None:
        query["fromSequence"] = from_sequence
    sent = dict(headers or {})
    if last_event_id is not None:
        sent["Last-Event-ID"] = str(last_event_id)
    frames: list[Frame] = []
    with client.stream("GET", f"{prefix}/sse", params=query, headers=sent) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        event_id: int | None = None
        data: list[str] = []
        for line in response.iter_lines():
            if line.startswith("id:"):
                event_id = int(line[3:].strip())
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif line == "" and data:
                frames.append(Frame(event_id, json.loads("\n".join(data))))
                event_id, data = None, []
    return frames


def status(client: httpx.Client, session_id: str, prefix: str = "", **kw: Any) -> dict[str, Any]:
    response = client.get(f"{prefix}/status", params={"sessionId": session_id}, **kw)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_status(
    client: httpx.Client,
    session_id: str,
    wanted: str,
    *,
    prefix: str = "",
    timeout: float = 20.0,
    **kw: Any,
) -> dict[str, Any]:
    """Poll ``/status`` until the session is ``wanted`` (for ``suspended_client_tool``: with a
    call still waiting for its answer)."""
    deadline = time.monotonic() + timeout
    while True:
        view = status(client, session_id, prefix, **kw)
        waiting = [p for p in view["pendingToolCalls"] if p.get("submittedAt") is None]
        if view["status"] == wanted and (wanted != "suspended_client_tool" or waiting):
            return view
        assert time.monotonic() < deadline, f"still {view['status']}: {view}"
        time.sleep(0.02)


def start(client: httpx.Client, message: str, *, prefix: str = "", **body: Any) -> dict[str, Any]:
    response = client.post(
        f"{prefix}/start", json={"agentType": "editor", "message": message, **body}
    )
    assert response.status_code == 200, response.text
    out: dict[str, Any] = response.json()
    return out


def start_parked(client: httpx.Client, message: str = EDIT) -> dict[str, Any]:
    """Start an editor turn and wait until it parks on ``editContent``; its one pending call."""
    session_id = start(client, message)["sessionId"]
    view = wait_status(client, session_id, "suspended_client_tool")
    call = view["pendingToolCalls"][0]
    return {
        "sessionId": session_id,
        "toolCallId": call["toolCallId"],
        "call": call,
        "runId": view["runId"],
    }


def assert_typed(response: httpx.Response, status_code: int, code: str) -> dict[str, Any]:
    """The response is the typed refusal ``{error, code, retryable, ...}`` with this status."""
    assert response.status_code == status_code, response.text
    body: dict[str, Any] = response.json()
    assert all(k in body for k in TYPED_KEYS), body
    assert isinstance(body["error"], str) and isinstance(body["retryable"], bool)
    assert body["code"] == code, body
    return body
