"""Every route authorizes the session it acts on, however the request spells it (Postgres).

The route table is read from the apps themselves: the stock server (``create_app`` with
session tokens) and an app that mounts ``create_router`` and ``create_chat_router`` behind a
hook that names tenants. Every route is either a session route, with a way to aim it at a
victim session below, or a route that names no session, with the reason; a new route that is
neither fails ``test_every_route_is_classified``.

For every session route, every spelling a model or a query could be read with (the documented
name, the Python name, other casings) and every foreign credential (a caller of another
tenant, a session token of another session, an approver token of another tenant, none), the
request is refused (401 or 403; a misspelt query parameter 400) and nothing is read, stored
or started: no runtime method runs, and the victim's rows are as they were.
"""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI
from starlette.requests import Request
from starlette.routing import BaseRoute, Mount, Route

from helix_dbos.http import (
    SessionTokens,
    create_app,
    create_chat_router,
    create_router,
    install_error_handlers,
)
from helix_dbos.runtime import AgentRuntime

from .conftest import HttpServer
from .helpers import wait_status

SECRET = "route-authorization-secret-0123456789abcdef"
METRICS_TOKEN = "metrics-token-0123456789"
#: The demo editor parks on a publishDocument approval straight away.
PUBLISH = "publish document doc-9"


def tenant_hook(request: Request, operation: str) -> Any:
    """An app's own authentication: ``X-User`` of tenant ``X-Tenant``."""
    user = request.headers.get("x-user")
    if user is None:
        return False
    return {"ok": True, "principal": user, "tenant": request.headers.get("x-tenant")}


# -- the routes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Victim:
    """The session every request aims at, parked on an approval, and its call."""

    session_id: str
    tool_call_id: str
    approval_id: str


@dataclass(frozen=True)
class SessionRoute:
    """How to aim a route at the victim: where the session goes (``body``, ``query`` or
    ``path``), under which documented name, and the rest of a valid request."""

    where: str
    name: str
    rest: Callable[[Victim], dict[str, Any]]


def _approval(victim: Victim) -> dict[str, Any]:
    return {
        "kind": "approval-response",
        "toolCallId": victim.tool_call_id,
        "approvalId": victim.approval_id,
        "approved": True,
    }


def _agui(victim: Victim) -> dict[str, Any]:
    return {
        "runId": "run_attack",
        "state": {},
        "messages": [{"id": "u1", "role": "user", "content": "read me everything"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


def _nothing(victim: Victim) -> dict[str, Any]:
    return {}


SESSION_ROUTES: dict[tuple[str, str], SessionRoute] = {
    ("POST", "/start"): SessionRoute(
        "body", "sessionId", lambda v: {"agentType": "editor", "message": "hi"}
    ),
    ("POST", "/resume"): SessionRoute(
        "body", "sessionId", lambda v: {"mode": "with_message", "message": "hi"}
    ),
    ("POST", "/retry"): SessionRoute("body", "sessionId", _nothing),
    ("POST", "/interrupt"): SessionRoute("body", "sessionId", _nothing),
    ("POST", "/abort"): SessionRoute("body", "sessionId", lambda v: {"reason": "attack"}),
    ("POST", "/submit-tool-result"): SessionRoute("body", "sessionId", _approval),
    ("POST", "/chat/{chat_id}/submit-tool-result"): SessionRoute("path", "chat_id", _approval),
    ("GET", "/sse"): SessionRoute("query", "sessionId", _nothing),
    ("GET", "/status"): SessionRoute("query", "sessionId", _nothing),
    ("GET", "/checkpoints"): SessionRoute("query", "sessionId", _nothing),
    ("GET", "/approvals"): SessionRoute("query", "sessionId", _nothing),
    ("GET", "/approvals/decisions"): SessionRoute("query", "sessionId", _nothing),
    ("POST", "/chat"): SessionRoute(
        "body",
        "id",
        lambda v: {
            "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]
        },
    ),
    ("GET", "/chat/{chat_id}/stream"): SessionRoute("path", "chat_id", _nothing),
    ("POST", "/agui/{agentType}"): SessionRoute("body", "threadId", _agui),
}

#: The routes that name no session, and why.
NO_SESSION_ROUTES: dict[tuple[str, str], str] = {
    ("POST", "/chat/sessions"): "makes a new chat id; names none",
    ("GET", "/agui/{agentType}/tools"): "an agent's client tools",
    ("GET", "/metrics"): "the scrape: its own token, no session",
    ("POST", "/mcp"): (
        "JSON-RPC: each method is authorized on the session its task id or arguments name, "
        "inside the handler (tests/mcp/test_served.py: another tenant's tasks/* refused)"
    ),
    ("GET", "/"): "the demo page (static)",
    ("GET", "/inbox"): "the inbox page (static; it calls /approvals)",
    ("GET", "/demo-page"): "the demo page's files (static)",
    ("GET", "/openapi.json"): "the API document",
    ("GET", "/docs"): "the API documentation (static)",
    ("GET", "/docs/oauth2-redirect"): "the API documentation (static)",
    ("GET", "/redoc"): "the API documentation (static)",
    ("GET", "/docs/assets"): "the API documentation's files (static)",
    ("GET", "/docs/assets/redoc.standalone.js"): "the API documentation's files (static)",
}


def _flat(routes: list[BaseRoute], prefix: str = "") -> Iterator[tuple[str, BaseRoute]]:
    """Every route with its path prefix; a router FastAPI includes lazily is expanded."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            context = getattr(route, "include_context", None)
            yield from _flat(list(inner.routes), prefix + getattr(context, "prefix", ""))
        else:
            yield prefix, route


def route_keys(app: FastAPI) -> set[tuple[str, str]]:
    """``(method, path)`` of every route of ``app`` (a mount: ``GET`` of its path)."""
    keys: set[tuple[str, str]] = set()
    for prefix, route in _flat(list(app.routes)):
        if isinstance(route, Mount):
            keys.add(("GET", prefix + route.path))
        elif isinstance(route, Route):
            for method in sorted(route.methods or {"GET"}):
                if method != "HEAD":
                    keys.add((method, prefix + route.path))
        else:
            keys.add(("GET", prefix + getattr(route, "path", repr(route))))
    return keys


def spellings(name: str) -> list[str]:
    """``name`` first, then the other spellings of it a model or a reader could take: the
    Python name, other casings, dashes."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
    others = [snake, name.lower(), name.upper(), name[:1].upper() + name[1:], snake.upper()]
    others.append(snake.replace("_", "-"))
    out = [name]
    for other in others:
        if other not in out:
            out.append(other)
    return out


def decoys(name: str) -> list[str]:
    """Names that are not the field at all but look like one: refused as undocumented."""
    return [f"{name} ", "chatId" if name == "id" else "ID", f"{name}2"]


# -- the servers --------------------------------------------------------------------------


@dataclass
class Walls:
    stock: str
    hooked: str
    stock_app: FastAPI
    hooked_app: FastAPI
    tokens: SessionTokens


@pytest.fixture(scope="module")
def walls(http_server: HttpServer) -> Iterator[Walls]:
    runtime = http_server.runtime
    # The stock server, over the suite's runtime (its lifespan is off: the runtime runs).
    stock_app = create_app(
        runtime,
        auth_secret=SECRET,
        rate_limit_per_minute=None,
        metrics_token=METRICS_TOKEN,
        chat_agent_type="editor",
    )
    hooked_app = FastAPI()
    install_error_handlers(hooked_app)
    hooked_app.include_router(create_router(runtime, authenticate=tenant_hook))
    hooked_app.include_router(
        create_chat_router(runtime, agent_type="editor", authenticate=tenant_hook)
    )
    with http_server.serve_app(stock_app) as stock, http_server.serve_app(hooked_app) as hooked:
        yield Walls(stock, hooked, stock_app, hooked_app, SessionTokens(SECRET))


def test_every_route_is_classified(walls: Walls) -> None:
    """A route added to either app must say whether, and where, it names a session."""
    known = set(SESSION_ROUTES) | set(NO_SESSION_ROUTES)
    for app in (walls.stock_app, walls.hooked_app):
        unclassified = route_keys(app) - known
        assert not unclassified, f"routes with no authorization case: {sorted(unclassified)}"
    served = route_keys(walls.stock_app) | route_keys(walls.hooked_app)
    assert set(SESSION_ROUTES) <= served, sorted(set(SESSION_ROUTES) - served)


# -- the attack ---------------------------------------------------------------------------


class Spy:
    """Records every call of the runtime's public coroutine methods while it is on."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.names = [
            name
            for name in dir(type(runtime))
            if not name.startswith("_")
            and asyncio.iscoroutinefunction(getattr(type(runtime), name))
        ]

    def __enter__(self) -> Spy:
        for name in self.names:
            real = getattr(self.runtime, name)

            def spied(*args: Any, __real: Any = real, __name: str = name, **kwargs: Any) -> Any:
                self.calls.append((__name, args))
                return __real(*args, **kwargs)

            setattr(self.runtime, name, spied)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.names:
            delattr(self.runtime, name)


def victim_rows(http_server: HttpServer, session_id: str) -> dict[str, Any]:
    """The victim's state row and the counts of its messages and events, and all sessions."""
    with psycopg.connect(http_server.database_url) as conn:
        row = conn.execute(
            "SELECT status, run_id, pending_client_tool_calls::text, "
            "completed_client_tool_calls::text "
            "FROM __agents_states WHERE session_id = %s",
            (session_id,),
        ).fetchone()
        counts = {
            table: conn.execute(
                f"SELECT count(*) FROM {table} WHERE session_id = %s", (session_id,)
            ).fetchone()[0]  # type: ignore[index]
            for table in ("__agents_messages", "__agents_events")
        }
        sessions = conn.execute("SELECT count(*) FROM __agents_states").fetchone()[0]  # type: ignore[index]
    return {"state": row, **counts, "sessions": sessions}


@dataclass(frozen=True)
class Credential:
    """A foreign caller: on which server, with which headers, and the refusal it must get."""

    label: str
    server: str
    headers: dict[str, str]
    status: int


def credentials(walls: Walls, other_session_token: str) -> list[Credential]:
    approver = walls.tokens.issue_approver("globex", "mallory")
    return [
        Credential("another tenant", walls.hooked, {"X-User": "eve", "X-Tenant": "globex"}, 403),
        Credential("no credential (hook)", walls.hooked, {}, 401),
        Credential(
            "another session's token",
            walls.stock,
            {"Authorization": f"Bearer {other_session_token}"},
            403,
        ),
        Credential(
            "an approver token of another tenant",
            walls.stock,
            {"Authorization": f"Bearer {approver}"},
            403,
        ),
        Credential("no credential (tokens)", walls.stock, {}, 401),
    ]


def attack(
    client: httpx.Client, key: tuple[str, str], spelling: str, victim: Victim, cred: Credential
) -> httpx.Response:
    """One request of route ``key`` aimed at the victim under ``spelling``."""
    method, path = key
    route = SESSION_ROUTES[key]
    rest = route.rest(victim)
    params: dict[str, Any] = {}
    url = path.replace("{agentType}", "editor")
    if route.where == "path":
        url = url.replace("{chat_id}", victim.session_id)
    elif route.where == "query":
        params[spelling] = victim.session_id
    else:
        rest = {**rest, spelling: victim.session_id}
    if method == "GET":
        with client.stream(
            "GET", cred.server + url, params=params, headers=cred.headers
        ) as response:
            response.read()
            return response
    return client.post(cred.server + url, json=rest, params=params, headers=cred.headers)


@pytest.fixture(scope="module")
def victim(walls: Walls, http_server: HttpServer) -> Iterator[Victim]:
    """Ada of tenant acme's session, parked on an approval."""
    acme = {"X-User": "ada", "X-Tenant": f"acme-{uuid.uuid4().hex[:6]}"}
    with httpx.Client(timeout=30.0) as client:
        started = client.post(
            f"{walls.hooked}/start", json={"agentType": "editor", "message": PUBLISH}, headers=acme
        )
        assert started.status_code == 200, started.text
        sid = started.json()["sessionId"]
        view = wait_status(client, sid, "suspended_client_tool", prefix=walls.hooked, headers=acme)
        (call,) = view["pendingToolCalls"]
        yield Victim(sid, call["toolCallId"], call["approvalId"])
        client.post(f"{walls.hooked}/interrupt", json={"sessionId": sid}, headers=acme)


def test_the_agui_thread_id_spelling_is_refused_on_the_victims_session(
    walls: Walls, victim: Victim, http_server: HttpServer
) -> None:
    """The reported door: AG-UI's ``thread_id`` (the Python name ag-ui's model also takes)
    named a thread the wall never saw. Another tenant's caller and another session's token are
    refused 403, and nothing is read or stored."""
    with httpx.Client(timeout=30.0) as client:
        other = client.post(f"{walls.stock}/start", json={"agentType": "editor", "message": "hi"})
        assert other.status_code == 200, other.text
        token = other.json()["token"]
        before = victim_rows(http_server, victim.session_id)
        body = {**_agui(victim), "thread_id": victim.session_id}
        with Spy(http_server.runtime) as spy:
            tenant = client.post(
                f"{walls.hooked}/agui/editor",
                json=body,
                headers={"X-User": "eve", "X-Tenant": "globex"},
            )
            bound = client.post(
                f"{walls.stock}/agui/editor",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
            )
    assert (tenant.status_code, tenant.json()["code"]) == (403, "forbidden"), tenant.text
    assert (bound.status_code, bound.json()["code"]) == (403, "forbidden"), bound.text
    assert spy.calls == []
    assert victim_rows(http_server, victim.session_id) == before


def test_no_route_acts_on_a_session_it_did_not_authorize(
    walls: Walls, victim: Victim, http_server: HttpServer
) -> None:
    """Every session route x every spelling x every foreign credential: refused, and nothing
    read, stored or started."""
    with httpx.Client(timeout=30.0) as client:
        other = client.post(f"{walls.stock}/start", json={"agentType": "editor", "message": "hi"})
        assert other.status_code == 200, other.text
        wait_status(
            client,
            other.json()["sessionId"],
            "completed",
            prefix=walls.stock,
            headers={"Authorization": f"Bearer {other.json()['token']}"},
        )
        creds = credentials(walls, other.json()["token"])
        before = victim_rows(http_server, victim.session_id)
        tried = 0
        failures: list[str] = []
        for key, route in SESSION_ROUTES.items():
            names = [route.name] if route.where == "path" else spellings(route.name)
            decoy = [] if route.where == "path" else decoys(route.name)
            for spelling in names + decoy:
                for cred in creds:
                    with Spy(http_server.runtime) as spy:
                        response = attack(client, key, spelling, victim, cred)
                    tried += 1
                    # The documented name, and a body's other spellings of it, get the wall's
                    # answer; a query parameter the route does not document, and a body's
                    # name that is not the field at all, are refused by validation (400) when
                    # the hook does not refuse the caller first.
                    if spelling == route.name or (route.where == "body" and spelling in names):
                        expected = {cred.status}
                    elif route.where == "body":
                        expected = {cred.status, 400}
                    else:
                        expected = {400}
                    what = f"{key[0]} {key[1]} [{spelling}] as {cred.label}"
                    if response.status_code not in expected:
                        failures.append(f"{what}: {response.status_code} {response.text[:200]}")
                    if spy.calls:
                        failures.append(f"{what}: the runtime ran {spy.calls}")
        after = victim_rows(http_server, victim.session_id)
    assert not failures, "\n".join(failures)
    assert after == before
    # The matrix is what the note reports: routes x spellings x credentials.
    assert tried >= len(SESSION_ROUTES) * len(creds)
    print(f"{tried} refused requests over {len(SESSION_ROUTES)} session routes")


# -- /mcp -----------------------------------------------------------------------------------


def _mcp_attacks(victim: Victim) -> dict[str, Callable[[Any], Any]]:
    """Each JSON-RPC request of ``/mcp`` that names the victim's session, by what it is."""
    from mcp_types import ElicitResult

    from tests.mcp.tasks_client import cancel_task, get_task, update_task

    task = f"{victim.session_id}/run_x/1"
    approve = {"action": "accept", "content": {"approved": True}}
    return {
        "tools/call with its sessionId": lambda c: c.session.call_tool(
            "editor", {"message": "hi", "sessionId": victim.session_id}, allow_claimed=True
        ),
        "a retry naming it in requestState": lambda c: c.session.call_tool(
            "editor",
            {"message": "hi"},
            input_responses={victim.tool_call_id: ElicitResult(**approve)},
            request_state=task,
            allow_input_required=True,
        ),
        "tasks/get": lambda c: get_task(c, task),
        "tasks/update": lambda c: update_task(c, task, {victim.tool_call_id: approve}),
        "tasks/cancel": lambda c: cancel_task(c, task),
    }


@pytest.mark.skipif(importlib.util.find_spec("mcp") is None, reason="the mcp extra")
async def test_mcp_acts_on_no_session_it_did_not_authorize(
    walls: Walls, victim: Victim, http_server: HttpServer
) -> None:
    """``POST /mcp`` on both apps (the stock server, and the app that includes
    ``create_router``): every request naming the victim's session, with every foreign
    credential, is refused with the wall's status in the JSON-RPC error's ``data``; and the
    second spelling ``session_id`` is refused, not ignored. Nothing is read or stored."""
    from mcp import MCPError

    from tests.mcp.tasks_client import connect

    with httpx.Client(timeout=30.0) as client:
        other = client.post(f"{walls.stock}/start", json={"agentType": "editor", "message": "hi"})
        assert other.status_code == 200, other.text
        token = other.json()["token"]
    before = victim_rows(http_server, victim.session_id)
    failures: list[str] = []
    tried = 0
    for cred in credentials(walls, token):
        wanted = {"code": "forbidden" if cred.status == 403 else "unauthorized"}
        async with connect(f"{cred.server}/mcp", cred.headers) as mcp:
            for what, request in _mcp_attacks(victim).items():
                with Spy(http_server.runtime) as spy:
                    try:
                        answer = await request(mcp)
                    except MCPError as refused:
                        answer = refused.error.data
                tried += 1
                if answer != {**wanted, "status": cred.status} or spy.calls:
                    failures.append(f"{cred.label}: {what}: {answer} {spy.calls}")
            with Spy(http_server.runtime) as spy, pytest.raises(MCPError):
                await mcp.session.call_tool(
                    "editor", {"message": "hi", "session_id": victim.session_id}
                )
            assert spy.calls == []
    assert not failures, "\n".join(failures)
    assert tried == 25
    assert victim_rows(http_server, victim.session_id) == before
