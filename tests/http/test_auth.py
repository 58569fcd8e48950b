"""Authentication: refusal at build time, session-bound tokens, the hook's answers."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.requests import Request

from helix_dbos.config import HelixSettings
from helix_dbos.demo import demo_agents
from helix_dbos.errors import ConfigError, RateLimitedError
from helix_dbos.http import (
    SessionTokens,
    create_app,
    create_router,
    request_principal,
    request_session_id,
    session_token_auth,
)
from helix_dbos.http.limits import SlidingWindowLimiter
from helix_dbos.runtime import AgentRuntime
from helix_dbos.testing import capture_log_events

from .conftest import SECRET, HttpServer
from .helpers import EDIT, assert_typed, read_sse, wait_status


@pytest.fixture
def idle_runtime(tmp_path: Any) -> AgentRuntime:
    """A runtime that is never launched (the routes below refuse before using it)."""
    return AgentRuntime(demo_agents(), HelixSettings(database_url=f"sqlite:///{tmp_path}/x.db"))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- build time -----------------------------------------------------------------------------


def test_router_refuses_to_build_without_authentication(
    idle_runtime: AgentRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither a hook nor allow_unauthenticated: ConfigError, for the router and the app."""
    monkeypatch.delenv("HELIX_AUTH_SECRET", raising=False)
    with pytest.raises(ConfigError, match="authentication"):
        create_router(idle_runtime)
    with pytest.raises(ConfigError):
        create_app(idle_runtime)


def test_unauthenticated_mode_warns_with_the_service_name(
    idle_runtime: AgentRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    """allow_unauthenticated logs WARN server.unauthenticated with the service and prints it."""
    with capture_log_events() as events:
        create_router(idle_runtime, allow_unauthenticated=True, service_name="api-v2")
    (event,) = [e for e in events if e["event"] == "server.unauthenticated"]
    assert event["level"] == "WARNING" and event["service"] == "api-v2"
    err = capsys.readouterr().err
    assert "WITHOUT authentication" in err and "api-v2" in err


def test_a_secret_turns_on_session_tokens(
    idle_runtime: AgentRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """create_app with HELIX_AUTH_SECRET builds without allow_unauthenticated; a short secret
    is refused."""
    monkeypatch.setenv("HELIX_AUTH_SECRET", SECRET)
    assert isinstance(create_app(idle_runtime), FastAPI)
    with pytest.raises(ConfigError, match="32 bytes"):
        create_app(idle_runtime, auth_secret="short")


# -- session tokens over the real server ----------------------------------------------------


def test_session_tokens_bind_every_call_to_its_session(
    client: httpx.Client, http_server: HttpServer
) -> None:
    """/start issues a token; without it 401, with another session's 403, expired or forged
    401; with it every route works (the stream takes it as ?token=)."""
    first = client.post("/secure/start", json={"agentType": "editor", "message": EDIT})
    assert first.status_code == 200, first.text
    sid, token = first.json()["sessionId"], first.json()["token"]
    other = client.post("/secure/start", json={"agentType": "editor", "message": EDIT})
    other_sid, other_token = other.json()["sessionId"], other.json()["token"]

    q = {"sessionId": sid}
    assert_typed(client.get("/secure/status", params=q), 401, "unauthorized")
    assert_typed(
        client.get("/secure/status", params=q, headers=bearer(other_token)), 403, "forbidden"
    )
    expired = http_server.tokens.issue(sid, expires_at=time.time() - 1)
    assert_typed(
        client.get("/secure/status", params=q, headers=bearer(expired)), 401, "unauthorized"
    )
    forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    assert_typed(
        client.get("/secure/status", params=q, headers=bearer(forged)), 401, "unauthorized"
    )
    foreign = SessionTokens("another-secret-of-at-least-32-bytes!!").issue(sid)
    assert_typed(
        client.get("/secure/status", params=q, headers=bearer(foreign)), 401, "unauthorized"
    )

    view = wait_status(
        client, sid, "suspended_client_tool", prefix="/secure", headers=bearer(token)
    )
    frames = read_sse(client, sid, prefix="/secure", params={"token": token})
    assert frames[-1].type == "suspended"
    assert (
        client.get("/secure/sse", params={"sessionId": sid, "token": other_token}).status_code
        == 403
    )

    call_id = view["pendingToolCalls"][0]["toolCallId"]
    body = {"sessionId": sid, "toolCallId": call_id, "result": {"applied": 1, "failed": 0}}
    assert_typed(client.post("/secure/submit-tool-result", json=body), 401, "unauthorized")
    assert_typed(
        client.post("/secure/submit-tool-result", json=body, headers=bearer(other_token)),
        403,
        "forbidden",
    )
    assert_typed(
        client.post(
            f"/secure/chat/{sid}/submit-tool-result", json=body, headers=bearer(other_token)
        ),
        403,
        "forbidden",
    )
    ok = client.post("/secure/submit-tool-result", json=body, headers=bearer(token))
    assert ok.status_code == 200 and ok.json()["status"] == "accepted"
    wait_status(client, sid, "completed", prefix="/secure", headers=bearer(token))

    # The next turn of an existing session needs that session's token.
    again = {"agentType": "editor", "message": EDIT, "sessionId": sid}
    assert_typed(client.post("/secure/start", json=again), 401, "unauthorized")
    assert_typed(
        client.post("/secure/start", json=again, headers=bearer(other_token)), 403, "forbidden"
    )
    next_turn = client.post("/secure/start", json=again, headers=bearer(token))
    assert next_turn.status_code == 200 and next_turn.json()["token"]

    for route in ("/secure/interrupt", "/secure/abort", "/secure/resume"):
        assert_typed(
            client.post(route, json={"sessionId": sid}, headers=bearer(other_token)),
            403,
            "forbidden",
        )
    for sess, tok in ((sid, token), (other_sid, other_token)):
        stop = client.post("/secure/interrupt", json={"sessionId": sess}, headers=bearer(tok))
        assert stop.status_code == 200, stop.text


# -- the hook's answers (in process: the hook refuses before the runtime is used) -----------


async def test_hook_answers_map_to_typed_refusals(idle_runtime: AgentRuntime) -> None:
    """False is a generic 401; {error, status} that status (a non-4xx status is 401); an
    async hook works; the hook sees the operation and the session the body names."""
    seen: list[tuple[str, str | None]] = []

    async def hook(request: Request, operation: str) -> Any:
        seen.append((operation, request_session_id(request)))
        token = request.headers.get("x-test", "")
        if token == "deny":
            return False
        if token == "teapot":
            return {"error": "no_tea", "status": 418}
        if token == "weird":
            return {"error": "odd", "status": 200}
        return None  # anything but True refuses

    app = FastAPI()
    app.include_router(create_router(idle_runtime, authenticate=hook))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        body = {"sessionId": "s-1", "toolCallId": "c", "result": 1}
        deny = await c.post("/submit-tool-result", json=body, headers={"x-test": "deny"})
        assert deny.status_code == 401 and deny.json()["code"] == "unauthorized"
        tea = await c.post("/interrupt", json={"sessionId": "s-2"}, headers={"x-test": "teapot"})
        assert tea.status_code == 418 and tea.json()["error"] == "no_tea"
        odd = await c.get("/status", params={"sessionId": "s-3"}, headers={"x-test": "weird"})
        assert odd.status_code == 401
        none = await c.post("/chat/s-4/submit-tool-result", json={"toolCallId": "c", "result": 1})
        assert none.status_code == 401
    assert seen == [
        ("submit-tool-result", "s-1"),
        ("interrupt", "s-2"),
        ("status", "s-3"),
        ("submit-tool-result", "s-4"),
    ]


async def test_a_hook_may_accept_with_ok_and_a_principal(idle_runtime: AgentRuntime) -> None:
    """The seed's shape: {ok: true, principal} accepts (the handler can read the principal);
    {ok: false, error, status} refuses with that status."""
    principals: list[Any] = []

    def hook(request: Request, operation: str) -> Any:
        if request.headers.get("x-user") == "ada":
            return {"ok": True, "principal": {"user": "ada"}}
        return {"ok": False, "error": "who are you?", "status": 403}

    app = FastAPI()
    app.include_router(create_router(idle_runtime, authenticate=hook))

    @app.get("/whoami")
    async def whoami(request: Request) -> Any:
        from helix_dbos.http.auth import run_authenticate

        await run_authenticate(hook, request, "status")
        principals.append(request_principal(request))
        return {}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        body = {"agentType": "nobody", "message": "hi"}
        accepted = await c.post("/start", json=body, headers={"x-user": "ada"})
        # Past the hook: the runtime answered (no such agent).
        assert accepted.status_code == 404, accepted.text
        assert accepted.json()["code"] == "framework_agent_not_found"
        refused = await c.post("/start", json=body)
        assert refused.status_code == 403 and refused.json()["error"] == "who are you?"
        assert (await c.get("/whoami", headers={"x-user": "ada"})).status_code == 200
    assert principals == [{"user": "ada"}]


def test_session_tokens_unit() -> None:
    """A token verifies to its session until it expires; a short secret is refused."""
    now = [1_000_000.0]
    tokens = SessionTokens(SECRET, ttl_seconds=60, clock=lambda: now[0])
    token = tokens.issue("ses_1")
    assert tokens.verify(token) == "ses_1"
    assert tokens.verify(token + "x") is None
    assert tokens.verify("garbage") is None and tokens.verify("a.b.c") is None
    assert tokens.verify(token + "\u00e9") is None and tokens.verify("\u00e9.\u00e9") is None
    now[0] += 61
    assert tokens.verify(token) is None
    with pytest.raises(ConfigError):
        SessionTokens("too-short")
    hook, issue = session_token_auth(SECRET)
    assert callable(hook) and isinstance(issue("s"), str)


def test_sliding_window_limiter_unit() -> None:
    """N hits per window per key; the refusal says when a slot frees up; other keys are free."""
    now = [0.0]
    limiter = SlidingWindowLimiter(2, clock=lambda: now[0])
    limiter.hit("a")
    now[0] = 10.0
    limiter.hit("a")
    with pytest.raises(RateLimitedError) as refused:
        limiter.hit("a")
    assert refused.value.details["retryAfterSeconds"] == 50
    limiter.hit("b")
    now[0] = 60.5
    limiter.hit("a")  # the first hit left the window
    with pytest.raises(ConfigError):
        SlidingWindowLimiter(0)


def test_limiter_counts_several_hits_all_or_none() -> None:
    """A request with several answers counts them together: it fits whole or is refused
    without counting any (and says when enough slots free up)."""
    now = [0.0]
    limiter = SlidingWindowLimiter(3, clock=lambda: now[0])
    limiter.hit("a", 2)
    now[0] = 20.0
    with pytest.raises(RateLimitedError) as refused:
        limiter.hit("a", 2)
    assert refused.value.details["retryAfterSeconds"] == 40
    limiter.hit("a")  # nothing was counted by the refusal
    with pytest.raises(RateLimitedError) as never:
        limiter.hit("b", 4)
    assert never.value.details["retryAfterSeconds"] == 60
