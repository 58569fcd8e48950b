"""``/status`` tells an approval wait from a client-tool wait (``waitingFor``), and ``/start``
over a parked turn is a non-retryable refusal that names the call."""

from __future__ import annotations

import httpx

from helix_dbos.http.schemas import StatusResponse

from .helpers import assert_typed, start, start_parked, status, wait_status


def test_status_and_start_over_an_approval(client: httpx.Client) -> None:
    sid = start(client, "publish document doc-7")["sessionId"]
    view = wait_status(client, sid, "suspended_client_tool")
    StatusResponse.model_validate(view)  # the documented shape
    assert view["waitingFor"] == ["approval"]
    (call,) = view["pendingToolCalls"]
    busy = client.post("/start", json={"agentType": "editor", "message": "x", "sessionId": sid})
    body = assert_typed(busy, 409, "state_already_running")
    assert body["retryable"] is False and body["waitingFor"] == ["approval"]
    assert f"an approval of publishDocument (call {call['toolCallId']})" in body["error"]
    client.post("/interrupt", json={"sessionId": sid})


def test_status_of_a_client_call_then_of_its_end(client: httpx.Client) -> None:
    parked = start_parked(client)
    sid = parked["sessionId"]
    assert status(client, sid)["waitingFor"] == ["client_tool"]
    answer = {"applied": 1, "failed": 0}
    submitted = client.post(
        "/submit-tool-result",
        json={"sessionId": sid, "toolCallId": parked["toolCallId"], "result": answer},
    )
    assert submitted.status_code == 200, submitted.text
    done = wait_status(client, sid, "completed")
    assert done["waitingFor"] == []
    StatusResponse.model_validate(done)
