"""The Vercel AI SDK chat endpoint end to end, over a real uvicorn server and the demo editor.

The chat router is served by a second uvicorn server on the suite server's loop, over the
same launched runtime (DBOS is one per process).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from helix_dbos.errors import ConfigError
from helix_dbos.http import install_error_handlers
from helix_dbos.http.chat import create_chat_router, message_id_for
from tests.support.ui_stream import read_chunks

from .conftest import HttpServer
from .helpers import assert_typed, wait_status

EDITS = 'replace "teh" with "the" and replace "adress" with "address"'


@pytest.fixture(scope="module")
def chat_url(http_server: HttpServer) -> Iterator[str]:
    """A server with the chat router (open, and with session tokens under ``/secure``)."""
    app = FastAPI()
    install_error_handlers(app)
    runtime = http_server.runtime
    app.include_router(
        create_chat_router(
            runtime, agent_type="editor", allow_unauthenticated=True, poll_seconds=0.02
        )
    )
    app.include_router(
        create_chat_router(
            runtime, agent_type="editor", authenticate=http_server.tokens.authenticate
        ),
        prefix="/secure",
    )
    app.include_router(
        create_chat_router(
            runtime, agent_type="editor", allow_unauthenticated=True, verbose_validation_errors=True
        ),
        prefix="/verbose",
    )
    with http_server.serve_app(app) as url:
        yield url


@pytest.fixture
def chat(chat_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=chat_url, timeout=20.0) as c:
        yield c


def post_chat(
    chat: httpx.Client, body: dict[str, Any], prefix: str = "", **kw: Any
) -> list[dict[str, Any]]:
    """POST /chat; the stream's chunks (asserting the headers and the final ``[DONE]``)."""
    with chat.stream("POST", f"{prefix}/chat", json=body, **kw) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["x-accel-buffering"] == "no"
        chunks = read_chunks(response)
    assert chunks and chunks[-1] == "[DONE]", chunks
    assert "[DONE]" not in chunks[:-1]
    out = [c for c in chunks if isinstance(c, dict)]
    assert out[0]["type"] == "start" and out[1]["type"] == "start-step", out
    return out


def user(text: str, msg_id: str = "u1") -> dict[str, Any]:
    return {"id": msg_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def send(chat: httpx.Client, chat_id: str, text: str, **kw: Any) -> list[dict[str, Any]]:
    body = {"id": chat_id, "messages": [user(text)], "trigger": "submit-message"}
    return post_chat(chat, body, **kw)


def assistant(*parts: dict[str, Any], msg_id: str = "a1") -> dict[str, Any]:
    return {"id": msg_id, "role": "assistant", "parts": [{"type": "step-start"}, *parts]}


def answer(chat: httpx.Client, chat_id: str, text: str, *parts: dict[str, Any]) -> httpx.Response:
    """POST /chat with the history and an assistant message carrying ``parts``; unread."""
    body = {
        "id": chat_id,
        "messages": [user(text), assistant(*parts)],
        "trigger": "submit-message",
        "messageId": "a1",
    }
    request = chat.build_request("POST", "/chat", json=body)
    return chat.send(request, stream=True)


def types(chunks: list[dict[str, Any]]) -> list[str]:
    return [str(c["type"]) for c in chunks]


def new_id() -> str:
    return f"chat_{uuid.uuid4().hex}"


def edit_part(call: dict[str, Any], state: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "tool-editContent",
        "toolCallId": call["toolCallId"],
        "state": state,
        "input": call["input"],
        **extra,
    }


def streamed(response: httpx.Response) -> list[dict[str, Any]]:
    try:
        assert response.status_code == 200, response.read()
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        chunks = read_chunks(response)
    finally:
        response.close()
    assert chunks[-1] == "[DONE]"
    return [c for c in chunks if isinstance(c, dict)]


def test_user_message_streams_the_client_call(chat: httpx.Client) -> None:
    chat_id = new_id()
    chunks = send(chat, chat_id, EDITS)
    assert chunks[0]["messageId"].startswith("msg_run_")
    (call,) = [c for c in chunks if c["type"] == "tool-input-available"]
    assert call["toolName"] == "editContent" and "providerExecuted" not in call
    assert call["input"] == {
        "edits": [
            {"selector": "teh", "replacement": "the"},
            {"selector": "adress", "replacement": "address"},
        ]
    }
    assert types(chunks)[-2:] == ["finish-step", "finish"]
    assert chunks[-1]["finishReason"] == "tool-calls"


def test_tool_output_continues_the_turn(
    chat: httpx.Client, client: httpx.Client, http_server: HttpServer
) -> None:
    chat_id = new_id()
    call = next(c for c in send(chat, chat_id, EDITS) if c["type"] == "tool-input-available")
    part = edit_part(call, "output-available", output={"applied": 2, "failed": 0})

    chunks = streamed(answer(chat, chat_id, EDITS, part))
    assert chunks[0] == {"type": "start", "messageId": "a1"}
    assert {
        "type": "tool-output-available",
        "toolCallId": call["toolCallId"],
        "output": {
            "applied": 2,
            "failed": 0,
        },
    } in chunks
    deltas = [c["delta"] for c in chunks if c["type"] == "text-delta"]
    assert deltas == ["Applied 2 edits."]
    # The reply is the next step: after the tool results, a new step opens.
    order = types(chunks)
    out_at = order.index("tool-output-available")
    assert order[out_at + 1 : out_at + 3] == ["finish-step", "start-step"]
    assert order[-2:] == ["finish-step", "finish"] and chunks[-1]["finishReason"] == "stop"
    assert wait_status(client, chat_id, "completed")

    # The same answer again: a finished stream with nothing in it, and nothing stored.
    before = http_server.count_rows()
    again = streamed(answer(chat, chat_id, EDITS, part))
    assert types(again) == ["start", "start-step", "finish-step", "finish"]
    assert http_server.count_rows() == before


def test_tool_error_is_reported(chat: httpx.Client) -> None:
    chat_id = new_id()
    call = next(c for c in send(chat, chat_id, EDITS) if c["type"] == "tool-input-available")
    part = edit_part(call, "output-error", errorText="the editor is read-only")
    chunks = streamed(answer(chat, chat_id, EDITS, part))
    (error,) = [c for c in chunks if c["type"] == "tool-output-error"]
    assert error["toolCallId"] == call["toolCallId"]
    assert "the editor is read-only" in error["errorText"]
    text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert text.startswith("The edits were not applied")
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}


def test_invalid_output_is_a_typed_400_before_any_stream(
    chat: httpx.Client, http_server: HttpServer
) -> None:
    chat_id = new_id()
    call = next(c for c in send(chat, chat_id, EDITS) if c["type"] == "tool-input-available")
    before = http_server.count_rows()
    bad = edit_part(call, "output-available", output={"applied": -1})
    response = answer(chat, chat_id, EDITS, bad)
    response.read()
    body = assert_typed(response, 400, "INVALID_RESULT")
    assert body["toolCallId"] == call["toolCallId"] and body["toolName"] == "editContent"
    assert http_server.count_rows() == before
    # The call still waits: a valid answer now continues the turn.
    good = edit_part(call, "output-available", output={"applied": 2, "failed": 0})
    chunks = streamed(answer(chat, chat_id, EDITS, good))
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}


def test_history_parts_for_other_calls_are_ignored(
    chat: httpx.Client, client: httpx.Client
) -> None:
    """Only calls the session waits on are answered: a client claim about any other call
    (an invented id) stores nothing and answers a finished stream."""
    chat_id = new_id()
    send(chat, chat_id, EDITS)
    forged = {
        "type": "tool-editContent",
        "toolCallId": "call_invented",
        "state": "output-available",
        "input": {},
        "output": {"applied": 9, "failed": 0},
    }
    chunks = streamed(answer(chat, chat_id, EDITS, forged))
    assert types(chunks) == ["start", "start-step", "finish-step", "finish"]
    assert wait_status(client, chat_id, "suspended_client_tool")["status"] == (
        "suspended_client_tool"
    )


def test_approval_flow(chat: httpx.Client) -> None:
    chat_id = new_id()
    text = 'replace "draft" with "final" and publish document doc-7'
    call = next(c for c in send(chat, chat_id, text) if c["type"] == "tool-input-available")
    edit = edit_part(call, "output-available", output={"applied": 1, "failed": 0})
    chunks = streamed(answer(chat, chat_id, text, edit))
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}
    (publish,) = [
        c
        for c in chunks
        if c["type"] == "tool-input-available" and c["toolName"] == "publishDocument"
    ]
    assert publish["input"] == {"documentId": "doc-7"}
    (request,) = [c for c in chunks if c["type"] == "tool-approval-request"]
    assert request["toolCallId"] == publish["toolCallId"]
    assert [c["delta"] for c in chunks if c["type"] == "text-delta"] == ["Applied 1 edit."]

    approved = {
        "type": "tool-publishDocument",
        "toolCallId": publish["toolCallId"],
        "state": "approval-responded",
        "input": {"documentId": "doc-7"},
        "approval": {"id": request["approvalId"], "approved": True},
    }
    # A forged input (not what the human was shown) is refused before any stream.
    forged = {**approved, "input": {"documentId": "other"}}
    response = answer(chat, chat_id, text, edit, forged)
    response.read()
    assert_typed(response, 400, "approval_mismatch")

    chunks = streamed(answer(chat, chat_id, text, edit, approved))
    (output,) = [c for c in chunks if c["type"] == "tool-output-available"]
    assert output["output"] == {"published": True, "url": "https://docs.example.com/doc-7"}
    reply = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert reply == "Applied 1 edit. Published the document at https://docs.example.com/doc-7."
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}


def test_approval_denied(chat: httpx.Client) -> None:
    chat_id = new_id()
    text = 'replace "teh" with "the", then publish'
    call = next(c for c in send(chat, chat_id, text) if c["type"] == "tool-input-available")
    edit = edit_part(call, "output-available", output={"applied": 2, "failed": 0})
    chunks = streamed(answer(chat, chat_id, text, edit))
    request = next(c for c in chunks if c["type"] == "tool-approval-request")
    denied = {
        "type": "tool-publishDocument",
        "toolCallId": request["toolCallId"],
        "state": "approval-responded",
        "input": {"documentId": "doc-1"},
        "approval": {"id": request["approvalId"], "approved": False, "reason": "not today"},
    }
    chunks = streamed(answer(chat, chat_id, text, edit, denied))
    assert {"type": "tool-output-denied", "toolCallId": request["toolCallId"]} in chunks
    reply = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert "not published" in reply and "not today" in reply


def test_next_message_starts_the_next_turn(chat: httpx.Client, client: httpx.Client) -> None:
    chat_id = new_id()
    one, two = 'replace "one" with "1"', 'replace "two" with "2"'
    call = next(c for c in send(chat, chat_id, one) if c["type"] == "tool-input-available")
    part = edit_part(call, "output-available", output={"applied": 1, "failed": 0})
    streamed(answer(chat, chat_id, one, part))
    wait_status(client, chat_id, "completed")
    chunks = send(chat, chat_id, two)
    (second,) = [c for c in chunks if c["type"] == "tool-input-available"]
    assert second["toolCallId"] != call["toolCallId"]
    assert second["input"] == {"edits": [{"selector": "two", "replacement": "2"}]}
    # The stream starts at the new turn: nothing of the first one is replayed.
    assert not [c for c in chunks if c["type"].startswith("text-")]


def test_new_message_while_parked_is_409(chat: httpx.Client) -> None:
    chat_id = new_id()
    send(chat, chat_id, EDITS)
    body = {"id": chat_id, "messages": [user("two")], "trigger": "submit-message"}
    assert_typed(chat.post("/chat", json=body), 409, "state_already_running")


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [user("x")]},
        {"id": "c", "messages": []},
        {"id": "c", "messages": [{"id": "m", "role": "robot", "parts": []}]},
        {"id": "c", "messages": [user("   ")]},
        {"id": "c", "messages": [user("x")], "trigger": "regenerate-message"},
    ],
)
def test_invalid_bodies_are_typed(chat: httpx.Client, body: dict[str, Any]) -> None:
    assert_typed(chat.post("/chat", json=body), 400, "validation_error")


def test_a_refused_chat_body_names_the_field(chat: httpx.Client) -> None:
    """A chat body without its id, or a message of an unknown role, names the field."""
    missing = assert_typed(
        chat.post("/chat", json={"messages": [user("x")]}), 400, "validation_error"
    )
    assert missing["field"] == "id"
    assert {"field": "id", "problem": "missing"} in missing["fields"]
    role = {"id": "c", "messages": [{"id": "m", "role": "robot", "parts": []}]}
    wrong = assert_typed(chat.post("/chat", json=role), 400, "validation_error")
    assert wrong["field"] == "messages[0].role", wrong


def test_not_json_is_typed(chat: httpx.Client) -> None:
    response = chat.post("/chat", content=b"{", headers={"content-type": "application/json"})
    assert_typed(response, 400, "validation_error")
    response = chat.post("/chat", content=b"hi", headers={"content-type": "text/plain"})
    assert_typed(response, 415, "validation_error")


def test_malformed_answer_is_typed(chat: httpx.Client) -> None:
    chat_id = new_id()
    call = next(c for c in send(chat, chat_id, EDITS) if c["type"] == "tool-input-available")
    part = edit_part(call, "output-error")  # no errorText
    response = answer(chat, chat_id, EDITS, part)
    response.read()
    assert_typed(response, 400, "validation_error")


def test_verbose_invalid_result_describes_the_issue(chat: httpx.Client) -> None:
    chat_id = new_id()
    call = next(c for c in send(chat, chat_id, EDITS) if c["type"] == "tool-input-available")
    body = {
        "id": chat_id,
        "messages": [user(EDITS), assistant(edit_part(call, "output-available", output={}))],
    }
    body_out = assert_typed(chat.post("/verbose/chat", json=body), 400, "INVALID_RESULT")
    assert "applied" in body_out["error"] and body_out["issues"]


def test_reconnect(chat: httpx.Client, client: httpx.Client) -> None:
    chat_id = new_id()
    assert chat.get(f"/chat/{chat_id}/stream").status_code == 204  # unknown
    first = send(chat, chat_id, EDITS)
    call = next(c for c in first if c["type"] == "tool-input-available")

    with chat.stream("GET", f"/chat/{chat_id}/stream") as response:
        assert response.status_code == 200
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        chunks = read_chunks(response)
    assert chunks[-1] == "[DONE]"
    replay = [c for c in chunks if isinstance(c, dict)]
    assert replay[0] == {"type": "start", "messageId": first[0]["messageId"]}
    (again,) = [c for c in replay if c["type"] == "tool-input-available"]
    assert again == {k: call[k] for k in ("type", "toolCallId", "toolName", "input")}
    assert replay[-1] == {"type": "finish", "finishReason": "tool-calls"}

    part = edit_part(call, "output-available", output={"applied": 2, "failed": 0})
    streamed(answer(chat, chat_id, EDITS, part))
    wait_status(client, chat_id, "completed")
    assert chat.get(f"/chat/{chat_id}/stream").status_code == 204  # completed


def test_reconnect_replays_an_approval(chat: httpx.Client) -> None:
    chat_id = new_id()
    text = 'replace "teh" with "the" and publish'
    call = next(c for c in send(chat, chat_id, text) if c["type"] == "tool-input-available")
    edit = edit_part(call, "output-available", output={"applied": 1, "failed": 0})
    streamed(answer(chat, chat_id, text, edit))
    response = chat.get(f"/chat/{chat_id}/stream")
    assert response.status_code == 200
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line[6:7] == "{"]
    assert types(chunks) == [
        "start",
        "start-step",
        "tool-input-available",
        "tool-approval-request",
        "finish-step",
        "finish",
    ]
    assert chunks[2]["toolName"] == "publishDocument"
    assert chunks[3]["approvalId"].endswith("::" + chunks[2]["toolCallId"])


def test_reconnect_while_running_streams_the_current_run(
    chat: httpx.Client, http_server: HttpServer
) -> None:
    """A running turn (its events so far) is streamed from its run's first event."""
    chat_id = new_id()
    handle = http_server.run(http_server.runtime.start("editor", EDITS, session_id=chat_id))
    # Read the stream right away: the turn may be running or already parked; either way
    # the client gets the call and the stream finishes with tool-calls.
    response = chat.get(f"/chat/{chat_id}/stream")
    assert response.status_code == 200
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line[6:7] == "{"]
    assert chunks[0] == {"type": "start", "messageId": message_id_for(handle.run_id)}
    assert [c["toolName"] for c in chunks if c["type"] == "tool-input-available"] == ["editContent"]
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}


def test_secure_chat_needs_a_token_for_its_session(
    chat: httpx.Client, http_server: HttpServer
) -> None:
    chat_id = new_id()
    body = {"id": chat_id, "messages": [user(EDITS)]}
    assert_typed(chat.post("/secure/chat", json=body), 401, "unauthorized")
    other = http_server.tokens.issue(new_id())
    response = chat.post("/secure/chat", json=body, headers={"authorization": f"Bearer {other}"})
    assert_typed(response, 403, "forbidden")
    token = http_server.tokens.issue(chat_id)
    chunks = send(
        chat, chat_id, EDITS, prefix="/secure", headers={"authorization": f"Bearer {token}"}
    )
    assert any(c["type"] == "tool-input-available" for c in chunks)
    assert_typed(chat.get(f"/secure/chat/{chat_id}/stream"), 401, "unauthorized")
    ok = chat.get(f"/secure/chat/{chat_id}/stream", params={"token": token})
    assert ok.status_code == 200


def test_refuses_to_build_without_authentication(http_server: HttpServer) -> None:
    with pytest.raises(ConfigError):
        create_chat_router(http_server.runtime, agent_type="editor")


def test_reconnect_after_an_interrupt_is_204(chat: httpx.Client, client: httpx.Client) -> None:
    chat_id = new_id()
    send(chat, chat_id, EDITS)
    assert client.post("/interrupt", json={"sessionId": chat_id}).status_code == 200
    wait_status(client, chat_id, "interrupted")
    assert chat.get(f"/chat/{chat_id}/stream").status_code == 204
    # The next message starts the next turn.
    chunks = send(chat, chat_id, EDITS)
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}


def test_invalid_chat_id_on_reconnect_is_typed(chat: httpx.Client) -> None:
    assert_typed(chat.get("/chat/%01x/stream"), 400, "validation_error")


def test_openapi_documents_the_chat_routes(chat: httpx.Client) -> None:
    paths = chat.get("/openapi.json").json()["paths"]
    post = paths["/chat"]["post"]
    assert "text/event-stream" in post["responses"]["200"]["content"]
    assert {"400", "401", "403", "409", "413", "415", "429"} <= set(post["responses"])
    schema = post["requestBody"]["content"]["application/json"]["schema"]
    assert {"id", "messages", "trigger", "messageId"} <= set(schema["properties"])
    get = paths["/chat/{chat_id}/stream"]["get"]
    assert {"200", "204", "401"} <= set(get["responses"])
