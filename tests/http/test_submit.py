"""POST /submit-tool-result over a real server: every answer of the seed's HTTP contract."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from helix_dbos.core.session import SessionState
from helix_dbos.errors import (
    INVALID_RESULT_MESSAGE,
    VALIDATION_ERROR_MESSAGE,
    RequestValidationError,
)

from .conftest import BODY_CAP, MAX_RESULT_BYTES, RATE_LIMIT, HttpServer
from .helpers import assert_typed, read_sse, start_parked, status, wait_status

JSON = {"content-type": "application/json"}


def submit(client: httpx.Client, body: dict[str, Any], prefix: str = "") -> httpx.Response:
    return client.post(f"{prefix}/submit-tool-result", json=body)


def answer(parked: dict[str, Any], result: Any) -> dict[str, Any]:
    return {"sessionId": parked["sessionId"], "toolCallId": parked["toolCallId"], "result": result}


def final_text(client: httpx.Client, session_id: str) -> str:
    frames = read_sse(client, session_id)
    assert frames[-1].type == "turn_end", frames[-1]
    return str(frames[-1].data["data"]["text"])


def test_accepted_then_already_completed(client: httpx.Client) -> None:
    """The answer is accepted with a new_run continuation; a re-send is already_completed,
    before and after the turn consumed it."""
    parked = start_parked(client)
    first = submit(client, answer(parked, {"applied": 2, "failed": 0}))
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["status"] == "accepted"
    assert body["continuation"] == {"kind": "new_run", "runId": f"{parked['runId']}:continuation"}

    again = submit(client, answer(parked, {"applied": 9, "failed": 9}))
    assert again.status_code == 200, again.text
    assert again.json()["status"] == "already_completed"

    wait_status(client, parked["sessionId"], "completed")
    assert final_text(client, parked["sessionId"]) == "Applied 2 edits."
    late = submit(client, answer(parked, {"applied": 1, "failed": 0}))
    assert late.status_code == 200
    assert late.json() == {
        "status": "already_completed",
        "continuation": {"kind": "consumed"},
        "toolCallId": parked["toolCallId"],
    }


def test_error_answer_is_accepted_and_reported(client: httpx.Client) -> None:
    """An error answer skips schema validation; the model reports what happened."""
    parked = start_parked(client)
    response = submit(
        client,
        {
            "sessionId": parked["sessionId"],
            "toolCallId": parked["toolCallId"],
            "error": "user_cancelled",
        },
    )
    assert response.status_code == 200 and response.json()["status"] == "accepted"
    wait_status(client, parked["sessionId"], "completed")
    assert "not applied" in final_text(client, parked["sessionId"])


def test_chat_route_takes_the_session_from_the_path(client: httpx.Client) -> None:
    """POST /chat/{id}/submit-tool-result: the path names the session; a different body
    sessionId is refused."""
    parked = start_parked(client)
    sid = parked["sessionId"]
    mismatch = client.post(
        f"/chat/{sid}/submit-tool-result",
        json={
            "sessionId": "another",
            "toolCallId": parked["toolCallId"],
            "result": {"applied": 1, "failed": 0},
        },
    )
    assert_typed(mismatch, 400, "validation_error")
    ok = client.post(
        f"/chat/{sid}/submit-tool-result",
        json={"toolCallId": parked["toolCallId"], "result": {"applied": 1, "failed": 0}},
    )
    assert ok.status_code == 200 and ok.json()["status"] == "accepted", ok.text
    wait_status(client, sid, "completed")


def test_unknown_tool_call_is_404(client: httpx.Client) -> None:
    """No pending call matches: 404 unknown_tool_call (typed as well), for a known or an
    unknown session."""
    parked = start_parked(client)
    for body in (
        {"sessionId": parked["sessionId"], "toolCallId": "call_nope", "result": 1},
        {"sessionId": f"ses_{uuid.uuid4().hex}", "toolCallId": "call_nope", "result": 1},
    ):
        response = submit(client, body)
        got = assert_typed(response, 404, "unknown_tool_call")
        assert got["status"] == "unknown_tool_call" and "reason" not in got
    client.post("/interrupt", json={"sessionId": parked["sessionId"]})


def test_submit_after_interrupt_is_404_run_stopped(client: httpx.Client) -> None:
    """Interrupt, then submit: 404 unknown_tool_call with reason run_stopped; nothing stored."""
    parked = start_parked(client)
    stopped = client.post("/interrupt", json={"sessionId": parked["sessionId"]})
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["status"] == "interrupted"
    response = submit(client, answer(parked, {"applied": 1, "failed": 0}))
    body = assert_typed(response, 404, "unknown_tool_call")
    assert body["status"] == "unknown_tool_call" and body["reason"] == "run_stopped"
    view = status(client, parked["sessionId"])
    assert view["status"] == "interrupted" and view["pendingToolCalls"] == []


def test_submit_to_a_superseded_run_is_409(client: httpx.Client, http_server: HttpServer) -> None:
    """A late submit to a superseded run is 409 state_run_superseded and writes nothing.

    A real supersede is a race: a run-start commit re-stamps the pending calls between the
    submit's read and its compare-and-swap. Over HTTP that window cannot be hit on purpose,
    so the test leaves the state that race leaves behind: the pending entry stamped with a run
    that is no longer the session's current run (edited through the runtime's store, on the
    server's loop). The submit's fenced write then refuses.
    """
    parked = start_parked(client)
    sid, tcid = parked["sessionId"], parked["toolCallId"]

    def restamp(states: dict[str, SessionState]) -> None:
        states[sid].pending[tcid].run_id = "run_that_was_superseded"

    http_server.run(http_server.runtime.store.update([sid], restamp))
    response = submit(client, answer(parked, {"applied": 1, "failed": 0}))
    assert_typed(response, 409, "state_run_superseded")
    entry = status(client, sid)["pendingToolCalls"][0]
    assert "submittedAt" not in entry
    client.post("/interrupt", json={"sessionId": sid})


BAD_SUBMITS: list[Any] = [
    {"toolCallId": "c1", "result": 1},  # no sessionId
    {"sessionId": "s1", "result": 1},  # no toolCallId
    {"sessionId": "s1", "toolCallId": "c1"},  # neither result nor error
    {"sessionId": "s1", "toolCallId": "c1", "result": 1, "error": "x"},  # both
    {"sessionId": "s1", "toolCallId": "c1", "result": 1, "approved": True},  # mixed kinds
    {"kind": "approval-response", "sessionId": "s1", "toolCallId": "c1", "approved": True},
    {
        "kind": "approval-response",
        "sessionId": "s1",
        "toolCallId": "c1",
        "approvalId": "a",
        "approved": "yes",
    },  # not a boolean
    {"kind": "something-else", "sessionId": "s1", "toolCallId": "c1", "result": 1},
    {"sessionId": "s1", "toolCallId": "c1", "result": 1, "extra": True},  # unknown field
    {"session_id": "s1", "toolCallId": "c1", "result": 1},  # snake_case
    {"sessionId": 7, "toolCallId": "c1", "result": 1},  # not a string
    {"sessionId": "", "toolCallId": "c1", "result": 1},  # empty id
    {"sessionId": "s\u0000", "toolCallId": "c1", "result": 1},  # NUL
    [1, 2, 3],  # not an object
    "text",
]
BAD_RAW = [
    b"{",
    b"not json",
    b'{"sessionId": NaN}',
    b'{"a": 1e999}',
    b"\xff\xfe",
    b'{"sessionId": "s1", "toolCallId": "c1", "result": "\\ud800"}',
    b"[" * 70 + b"]" * 70,
    b"[" * 3_000 + b"]" * 3_000,
]


def test_invalid_bodies_are_400_with_the_fixed_message(client: httpx.Client) -> None:
    """Every malformed submit is 400 validation_error with the fixed message and no details."""
    for body in BAD_SUBMITS:
        got = assert_typed(submit(client, body), 400, "validation_error")
        assert got["error"] == VALIDATION_ERROR_MESSAGE, body
        assert "details" not in got
    for raw in BAD_RAW:
        response = client.post("/submit-tool-result", content=raw, headers=JSON)
        got = assert_typed(response, 400, "validation_error")
        assert got["error"] == VALIDATION_ERROR_MESSAGE and "details" not in got


def test_verbose_validation_errors_carry_details(client: httpx.Client) -> None:
    """With verbose_validation_errors the 400 also carries the pydantic issues."""
    got = assert_typed(
        submit(client, {"sessionId": "s1"}, prefix="/verbose"), 400, "validation_error"
    )
    assert got["error"] == VALIDATION_ERROR_MESSAGE
    locs = {tuple(d["loc"]) for d in got["details"]}
    assert ("toolCallId",) in locs


def test_result_failing_the_output_schema_is_400_invalid_result(client: httpx.Client) -> None:
    """A result that fails the tool's output schema: 400 INVALID_RESULT with the fixed message
    (verbose: the issues); nothing stored, the call still takes a valid answer."""
    parked = start_parked(client)
    response = submit(client, answer(parked, {"applied": -1, "failed": 0}))
    body = assert_typed(response, 400, "INVALID_RESULT")
    assert body["error"] == INVALID_RESULT_MESSAGE
    assert body["toolName"] == "editContent" and body["toolCallId"] == parked["toolCallId"]
    assert "issues" not in body and "applied" not in json.dumps(body)

    verbose = assert_typed(
        submit(client, answer(parked, {"applied": "x"}), prefix="/verbose"), 400, "INVALID_RESULT"
    )
    assert verbose["error"] != INVALID_RESULT_MESSAGE and "applied" in verbose["error"]
    assert verbose["issues"]

    assert "submittedAt" not in status(client, parked["sessionId"])["pendingToolCalls"][0]
    ok = submit(client, answer(parked, {"applied": 0, "failed": 1}))
    assert ok.status_code == 200 and ok.json()["status"] == "accepted"
    wait_status(client, parked["sessionId"], "completed")


def test_chunked_body_without_length_is_411(client: httpx.Client) -> None:
    """Transfer-Encoding without Content-Length: 411 validation_error, cause length_required."""

    def chunks() -> Iterator[bytes]:
        yield b'{"sessionId": "s1", '
        yield b'"toolCallId": "c1", "result": 1}'

    response = client.post("/submit-tool-result", content=chunks(), headers=JSON)
    assert "content-length" not in response.request.headers
    body = assert_typed(response, 411, "validation_error")
    assert body["cause"] == "length_required"


def test_body_over_the_guard_is_413_request_body(
    client: httpx.Client, http_server: HttpServer
) -> None:
    """A body over max_result_bytes x 4 is refused from its Content-Length: 413 request_body."""
    parked = start_parked(client)
    before = http_server.count_rows()
    raw = json.dumps(answer(parked, "x" * BODY_CAP)).encode()
    response = client.post("/submit-tool-result", content=raw, headers=JSON)
    body = assert_typed(response, 413, "validation_payload_too_large")
    assert body["retryable"] is False
    assert body["cause"] == "request_body"
    assert body["limitBytes"] == BODY_CAP and body["sizeBytes"] == len(raw)
    assert http_server.count_rows() == before
    assert "submittedAt" not in status(client, parked["sessionId"])["pendingToolCalls"][0]
    client.post("/interrupt", json={"sessionId": parked["sessionId"]})


def test_result_over_the_limit_is_413_tool_result(client: httpx.Client) -> None:
    """A result over max_result_bytes (within the body guard): 413 tool_result; the call stays
    pending and a smaller answer is accepted."""
    parked = start_parked(client)
    big = {"applied": 1, "failed": 0, "newVersionId": "v" * MAX_RESULT_BYTES}
    body = assert_typed(submit(client, answer(parked, big)), 413, "validation_payload_too_large")
    assert body["cause"] == "tool_result" and body["limitBytes"] == MAX_RESULT_BYTES
    assert body["sizeBytes"] > MAX_RESULT_BYTES and body["retryable"] is False
    assert "submittedAt" not in status(client, parked["sessionId"])["pendingToolCalls"][0]
    ok = submit(client, answer(parked, {"applied": 1, "failed": 0, "newVersionId": "v2"}))
    assert ok.status_code == 200 and ok.json()["status"] == "accepted"
    wait_status(client, parked["sessionId"], "completed")


def test_too_many_submits_for_a_session_is_429(client: httpx.Client) -> None:
    """Past the per-session limit: 429 rate_limited with Retry-After; other sessions are not
    affected."""
    sid = f"ses_{uuid.uuid4().hex}"
    for _ in range(RATE_LIMIT):
        assert submit(client, {"sessionId": sid, "toolCallId": "c", "result": 1}).status_code == 404
    limited = submit(client, {"sessionId": sid, "toolCallId": "c", "result": 1})
    body = assert_typed(limited, 429, "rate_limited")
    assert body["retryable"] is True
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    other = submit(client, {"sessionId": f"ses_{uuid.uuid4().hex}", "toolCallId": "c", "result": 1})
    assert other.status_code == 404


def test_a_body_that_is_not_json_media_is_415(client: httpx.Client) -> None:
    """A body not declared application/json is refused before it is read (CSRF-safe)."""
    response = client.post(
        "/submit-tool-result", content=b'{"sessionId": "s"}', headers={"content-type": "text/plain"}
    )
    body = assert_typed(response, 415, "validation_error")
    assert body["cause"] == "content_type"


def test_the_runtime_refuses_a_result_that_is_not_json(
    client: httpx.Client, http_server: HttpServer
) -> None:
    """Behind the route, the runtime's own check refuses NaN, lone surrogates and objects JSON
    cannot encode (typed, nothing stored), for callers of the Python API."""
    parked = start_parked(client)
    runtime = http_server.runtime
    for bad in (float("nan"), {"text": "\ud800"}, object()):
        with pytest.raises(RequestValidationError) as refused:
            http_server.run(
                runtime.submit_tool_result(parked["sessionId"], parked["toolCallId"], result=bad)
            )
        assert refused.value.details["cause"] == "result_not_json"
    assert "submittedAt" not in status(client, parked["sessionId"])["pendingToolCalls"][0]
    client.post("/interrupt", json={"sessionId": parked["sessionId"]})
