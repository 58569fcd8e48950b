"""The server's routes in process, over a launched runtime: /chat's all-or-nothing answers,
one rate-limit window per session across the agent routes and the chat, POST /chat/sessions
through the hook, text_delta streamed live, the service name on events, and the suspension
reason of approvals."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI
from pydantic import BaseModel
from starlette.requests import Request

from helix_dbos import define_agent, define_tool
from helix_dbos.demo import demo_agents
from helix_dbos.http import SessionTokens, create_app, create_chat_router, install_error_handlers
from helix_dbos.llm import ScriptedLLM, call, reply
from helix_dbos.observability.log import set_service_name
from helix_dbos.testing import capture_log_events
from tests.serve.streams import chunks_of, user
from tests.support.asgi import client_for

SECRET = "route-tests-secret-0123456789abcdef01234"
#: A message the demo editor answers with an editContent call.
EDIT = 'replace "a" with "b"'


class Ask(BaseModel):
    question: str


class Count(BaseModel):
    count: int


def _pair_model(request: Any) -> Any:
    last = request.messages[-1]
    if last.role == "user":
        return call(request, ("countA", {"question": "a?"}), ("countB", {"question": "b?"}))
    return reply("done")


PAIR = define_agent(
    "pair",
    llm=ScriptedLLM(_pair_model),
    tools=[
        define_tool("countA", "Count A", Ask, Count, execute="client"),
        define_tool("countB", "Count B", Ask, Count, execute="client"),
    ],
)


def answers(chat_id: str, calls: list[dict[str, Any]], outputs: list[Any]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "step-start"}]
    for c, output in zip(calls, outputs, strict=True):
        parts.append(
            {
                "type": f"tool-{c['toolName']}",
                "toolCallId": c["toolCallId"],
                "state": "output-available",
                "input": c["input"],
                "output": output,
            }
        )
    return {
        "id": chat_id,
        "messages": [user("go"), {"id": "a1", "role": "assistant", "parts": parts}],
        "trigger": "submit-message",
        "messageId": "a1",
    }


async def start_pair(c: httpx.AsyncClient, chat_id: str) -> list[dict[str, Any]]:
    body = {"id": chat_id, "messages": [user("go")], "trigger": "submit-message"}
    first = await c.post("/chat", json=body)
    assert first.status_code == 200, first.text
    calls = [ch for ch in chunks_of(first.text) if ch["type"] == "tool-input-available"]
    assert [ch["toolName"] for ch in calls] == ["countA", "countB"]
    return calls


async def test_chat_checks_every_answer_before_storing_any(make_runtime: Any) -> None:
    """Two answers in one /chat request, the second invalid (or too large): the request is
    refused and the first answer is NOT stored; a valid pair then continues the turn."""
    runtime = await make_runtime([PAIR], max_result_bytes=200)
    app = create_app(runtime, allow_unauthenticated=True)
    async with client_for(app) as c:
        calls = await start_pair(c, "chat-precheck")
        invalid = await c.post(
            "/chat", json=answers("chat-precheck", calls, [{"count": 1}, {"count": "many"}])
        )
        assert invalid.status_code == 400 and invalid.json()["code"] == "INVALID_RESULT"
        too_large = await c.post(
            "/chat",
            json=answers("chat-precheck", calls, [{"count": 1}, {"count": 2, "x": "y" * 300}]),
        )
        assert too_large.status_code == 413, too_large.text
        assert too_large.json()["cause"] == "tool_result"
        view = await runtime.status("chat-precheck")
        assert [p.get("submittedAt") for p in view["pendingToolCalls"]] == [None, None]
        ok = await c.post(
            "/chat", json=answers("chat-precheck", calls, [{"count": 1}, {"count": 2}])
        )
        assert ok.status_code == 200, ok.text
    final = await runtime.wait("chat-precheck")
    assert final["status"] == "completed"


async def test_one_rate_limit_window_per_session_across_routes(make_runtime: Any) -> None:
    """create_app gives the agent routes and the chat one limiter: answers through either
    count against the session's one window (the documented limit, not twice it)."""
    runtime = await make_runtime([PAIR])
    app = create_app(runtime, allow_unauthenticated=True, rate_limit_per_minute=3)
    async with client_for(app) as c:
        calls = await start_pair(c, "chat-limit")
        for _ in range(2):  # unknown calls are refused by the runtime, but they count
            miss = await c.post(
                "/submit-tool-result",
                json={"sessionId": "chat-limit", "toolCallId": "nope", "result": 1},
            )
            assert miss.status_code == 404
        both = await c.post(
            "/chat", json=answers("chat-limit", calls, [{"count": 1}, {"count": 2}])
        )
        assert both.status_code == 429 and both.json()["code"] == "rate_limited"
        assert both.headers["retry-after"]
        view = await runtime.status("chat-limit")
        assert [p.get("submittedAt") for p in view["pendingToolCalls"]] == [None, None]
        one = await c.post(
            "/chat/chat-limit/submit-tool-result",
            json={"toolCallId": calls[0]["toolCallId"], "result": {"count": 1}},
        )
        assert one.status_code == 200, one.text
        last = await c.post(
            "/submit-tool-result",
            json={
                "sessionId": "chat-limit",
                "toolCallId": calls[1]["toolCallId"],
                "result": {"count": 2},
            },
        )
        assert last.status_code == 429
    await runtime.interrupt("chat-limit")


async def test_chat_sessions_issue_an_id_and_token_through_the_hook(make_runtime: Any) -> None:
    """POST /chat/sessions: the hook sees `chat-new` (no session yet); with session tokens
    the answer's token opens that chat and no other; authorize_start gates it."""
    runtime = await make_runtime(demo_agents())
    seen: list[str] = []

    def only_ada(request: Request, operation: str) -> Any:
        seen.append(operation)
        return request.headers.get("x-user") == "ada"

    tokens = SessionTokens(SECRET, authorize_start=only_ada)
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(
        create_chat_router(
            runtime,
            agent_type="editor",
            authenticate=tokens.authenticate,
            token_issuer=tokens.issue,
        )
    )
    async with client_for(app) as c:
        refused = await c.post("/chat/sessions")
        assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"
        created = await c.post("/chat/sessions", headers={"x-user": "ada"})
        assert created.status_code == 200, created.text
        chat_id, token = created.json()["id"], created.json()["token"]
        assert tokens.verify(token) == chat_id and seen == ["chat-new", "chat-new"]
        body = {"id": chat_id, "messages": [user(EDIT)], "trigger": "submit-message"}
        streamed = await c.post("/chat", json=body, headers={"Authorization": f"Bearer {token}"})
        assert streamed.status_code == 200
        chunks = chunks_of(streamed.text)
        assert [ch["toolName"] for ch in chunks if ch["type"] == "tool-input-available"] == [
            "editContent"
        ]
        other = {**body, "id": "someone-else"}
        forbidden = await c.post("/chat", json=other, headers={"Authorization": f"Bearer {token}"})
        assert forbidden.status_code == 403
    await runtime.interrupt(chat_id)


async def test_chat_streams_text_deltas_live(make_runtime: Any) -> None:
    """The model's live text (text_delta events) is the chat's text part; the step's recorded
    text closes it rather than sending the text a second time."""
    echo = define_agent("echo", llm=ScriptedLLM(lambda r: reply("Hello there")))
    runtime = await make_runtime([echo])
    app = create_app(runtime, allow_unauthenticated=True)
    async with client_for(app) as c:
        body = {"id": "chat-delta", "messages": [user("hi")], "trigger": "submit-message"}
        streamed = await c.post("/chat", json=body)
    chunks = chunks_of(streamed.text)
    (delta_event,) = [e for e in await runtime.events("chat-delta") if e.type == "text_delta"]
    text_parts = [ch for ch in chunks if ch["type"].startswith("text-")]
    assert text_parts == [
        {"type": "text-start", "id": f"text_{delta_event.sequence}"},
        {"type": "text-delta", "id": f"text_{delta_event.sequence}", "delta": "Hello there"},
        {"type": "text-end", "id": f"text_{delta_event.sequence}"},
    ]


async def test_the_routers_service_name_tags_events(make_runtime: Any) -> None:
    """create_router(service_name=...) tags the log events with `service`."""
    runtime = await make_runtime(demo_agents())
    try:
        app = create_app(runtime, allow_unauthenticated=True, service_name="billing-bot")
        with capture_log_events() as events:
            async with client_for(app) as c:
                started = await c.post("/start", json={"agentType": "editor", "message": EDIT})
                sid = started.json()["sessionId"]
                await runtime.wait_for_pending(sid)
                await c.post("/interrupt", json={"sessionId": sid})
        suspended = [e for e in events if e["event"] == "client_tool.suspended"]
        assert suspended and all(e["service"] == "billing-bot" for e in suspended)
        summary = [e for e in events if e["event"] == "turn.summary"]
        assert summary and summary[0]["service"] == "billing-bot"
    finally:
        set_service_name(None)


async def test_a_suspension_on_an_approval_says_reason_approval(make_runtime: Any) -> None:
    runtime = await make_runtime(demo_agents())
    turn = await runtime.start("editor", 'replace "a" with "b" and publish')
    (edit,) = await runtime.wait_for_pending(turn.session_id)
    await runtime.submit_tool_result(
        turn.session_id, edit["toolCallId"], result={"applied": 1, "failed": 0}
    )
    events: list[Any] = []
    for _ in range(200):
        events = [e for e in await runtime.events(turn.session_id) if e.type == "suspended"]
        if len(events) == 2:
            break
        import asyncio

        await asyncio.sleep(0.05)
    assert [e.data["reason"] for e in events] == ["client_tool", "approval"]
    await runtime.interrupt(turn.session_id)
