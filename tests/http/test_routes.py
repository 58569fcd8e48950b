"""/start, /resume, /status, /interrupt and /abort over a real server."""

from __future__ import annotations

import uuid

import httpx

from .helpers import assert_typed, read_sse, start, start_parked, status, wait_status


def test_start_answers_session_and_run(client: httpx.Client) -> None:
    """/start answers {sessionId, runId} (no token without session tokens)."""
    out = start(client, "hello")
    assert set(out) == {"sessionId", "runId"}
    assert out["sessionId"].startswith("ses_") and out["runId"].startswith("run_")
    client.post("/interrupt", json={"sessionId": out["sessionId"]})


def test_start_refusals_are_typed(client: httpx.Client) -> None:
    """An unknown agent is 404; a session with a parked turn is 409 state_already_running."""
    unknown = client.post("/start", json={"agentType": "nobody", "message": "hi"})
    assert_typed(unknown, 404, "framework_agent_not_found")
    parked = start_parked(client)
    busy = client.post(
        "/start", json={"agentType": "editor", "message": "again", "sessionId": parked["sessionId"]}
    )
    body = assert_typed(busy, 409, "state_already_running")
    # Parked: retrying cannot help until someone answers, interrupts or abandons the call.
    assert body["retryable"] is False
    assert body["waitingFor"] == ["client_tool"]
    assert body["awaitedToolCallIds"] == [parked["toolCallId"]]
    missing = client.post("/start", json={"message": "hi"})
    assert_typed(missing, 400, "validation_error")
    client.post("/interrupt", json={"sessionId": parked["sessionId"]})


def test_start_refuses_an_empty_or_blank_message_naming_the_field(client: httpx.Client) -> None:
    """An empty or whitespace-only message runs no turn: 400 ``validation_error`` naming the
    field ``message`` and its problem ``blank``; a missing field and an unknown one are named
    too (``missing``, ``extra_forbidden``)."""
    for message in ("", "   ", "\n\t "):
        refused = client.post("/start", json={"agentType": "editor", "message": message})
        body = assert_typed(refused, 400, "validation_error")
        assert body["cause"] == "schema"
        assert body["field"] == "message"
        assert body["fields"] == [{"field": "message", "problem": "blank"}]
    missing = assert_typed(client.post("/start", json={"message": "hi"}), 400, "validation_error")
    assert missing["fields"] == [{"field": "agentType", "problem": "missing"}]
    typo = {"agentType": "editor", "mesage": "hi"}
    misspelt = assert_typed(client.post("/start", json=typo), 400, "validation_error")
    assert misspelt["field"] == "message"
    assert {"field": "mesage", "problem": "extra_forbidden"} in misspelt["fields"]
    # Leading and trailing whitespace around text is the user's: kept, not refused.
    out = start(client, "  hello  ")
    client.post("/interrupt", json={"sessionId": out["sessionId"]})


def test_resume_and_retry_refuse_a_blank_message_naming_the_field(client: httpx.Client) -> None:
    """A new message delivered over a parked turn, or a retry's replacement input, is a user
    message too: empty or whitespace-only is refused before anything is read."""
    bodies = [
        ("/resume", {"mode": "with_message"}),
        ("/retry", {}),
    ]
    for route, rest in bodies:
        for message in ("", "  \n"):
            body = {"sessionId": "ses_missing", "message": message, **rest}
            refused = assert_typed(client.post(route, json=body), 400, "validation_error")
            assert refused["fields"] == [{"field": "message", "problem": "blank"}], route


def test_start_continues_an_ended_session(client: httpx.Client) -> None:
    """/start with the sessionId of an ended session runs its next turn."""
    parked = start_parked(client)
    sid = parked["sessionId"]
    client.post(
        "/submit-tool-result",
        json={
            "sessionId": sid,
            "toolCallId": parked["toolCallId"],
            "result": {"applied": 1, "failed": 0},
        },
    )
    wait_status(client, sid, "completed")
    again = start(client, 'replace "x" with "y"', sessionId=sid)
    assert again["sessionId"] == sid
    view = wait_status(client, sid, "suspended_client_tool")
    assert view["pendingToolCalls"][0]["input"] == {
        "edits": [{"selector": "x", "replacement": "y"}]
    }
    client.post("/interrupt", json={"sessionId": sid})


def test_status_lists_pending_calls(client: httpx.Client) -> None:
    """/status is the runtime's view: status, run and the pending calls with their inputs."""
    parked = start_parked(client, 'replace "a" with "b"')
    view = status(client, parked["sessionId"])
    assert view["status"] == "suspended_client_tool"
    (call,) = view["pendingToolCalls"]
    assert call["toolName"] == "editContent" and call["kind"] == "client"
    assert call["input"] == {"edits": [{"selector": "a", "replacement": "b"}]}
    client.post("/interrupt", json={"sessionId": parked["sessionId"]})


def test_status_and_sse_refusals_are_typed(client: httpx.Client) -> None:
    """Unknown session: 404 state_not_found; a missing or bad query parameter: 400."""
    missing = f"ses_{uuid.uuid4().hex}"
    assert_typed(client.get("/status", params={"sessionId": missing}), 404, "state_not_found")
    assert_typed(client.get("/sse", params={"sessionId": missing}), 404, "state_not_found")
    assert_typed(client.get("/status"), 400, "validation_error")
    assert_typed(
        client.get("/sse", params={"sessionId": "s", "fromSequence": "x"}), 400, "validation_error"
    )
    assert_typed(
        client.get("/sse", params={"sessionId": "s"}, headers={"Last-Event-ID": "-1"}),
        400,
        "validation_error",
    )
    # Header bytes decode as latin-1: a superscript digit is not a sequence.
    for raw in (b"\xb2", "\u00b2".encode()):
        refused = client.get("/sse", params={"sessionId": "s"}, headers={b"Last-Event-ID": raw})
        assert_typed(refused, 400, "validation_error")
    bad_token = client.get(
        "/secure/status", params={"sessionId": "s"}, headers={b"Authorization": b"Bearer \xe9.\xe9"}
    )
    assert_typed(bad_token, 401, "unauthorized")


def test_resume_refusals_and_with_message(client: httpx.Client) -> None:
    """continue on a partial batch: 409 (retryable); with_message without a message: 400;
    with_message + abandonPending delivers the message and the turn runs on."""
    parked = start_parked(client)
    sid = parked["sessionId"]
    partial = client.post("/resume", json={"sessionId": sid, "mode": "continue"})
    body = assert_typed(partial, 409, "state_not_resumable")
    assert body["retryable"] is True
    no_message = client.post("/resume", json={"sessionId": sid, "mode": "with_message"})
    assert_typed(no_message, 400, "validation_error")
    unknown = client.post("/resume", json={"sessionId": f"ses_{uuid.uuid4().hex}"})
    assert_typed(unknown, 404, "state_not_found")

    resumed = client.post(
        "/resume",
        json={
            "sessionId": sid,
            "mode": "with_message",
            "message": 'replace "p" with "q"',
            "abandonPending": True,
        },
    )
    assert resumed.status_code == 200, resumed.text
    assert resumed.json() == {"sessionId": sid, "runId": f"{parked['runId']}:continuation"}
    # The abandoned call gets its result, then the message runs: the editor asks again.
    frames = read_sse(client, sid)
    ends = [f for f in frames if f.type == "tool_end"]
    assert ends[0].data["data"]["errorCode"] == "client_tool_abandoned"
    view = wait_status(client, sid, "suspended_client_tool")
    assert view["pendingToolCalls"][0]["input"]["edits"] == [{"selector": "p", "replacement": "q"}]
    client.post("/interrupt", json={"sessionId": sid})


def test_interrupt_and_abort(client: httpx.Client) -> None:
    """/interrupt ends the turn interrupted; /abort ends it failed with framework_cancelled."""
    first = start_parked(client)
    stopped = client.post("/interrupt", json={"sessionId": first["sessionId"]})
    assert stopped.status_code == 200
    assert stopped.json()["status"] == "interrupted"

    second = start_parked(client)
    aborted = client.post("/abort", json={"sessionId": second["sessionId"], "reason": "user left"})
    assert aborted.status_code == 200 and aborted.json()["status"] == "failed"
    view = status(client, second["sessionId"])
    assert view["error"]["code"] == "framework_cancelled"
    assert view["error"]["message"] == "user left"
    assert_typed(
        client.post("/abort", json={"sessionId": f"ses_{uuid.uuid4().hex}"}), 404, "state_not_found"
    )
