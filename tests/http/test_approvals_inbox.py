"""``GET /approvals`` and scoping by tenant, over HTTP (Postgres).

Two routers over the suite's runtime, served on its loop: ``/users`` behind a hook that answers
``{ok, principal, tenant, approver}`` from request headers (an app's own authentication), and
``/tokens`` behind ``SessionTokens`` (sessions started with an owner by ``authorize_start``,
approver tokens for a tenant). One tenant's approver can neither see nor answer nor stream
another tenant's approvals; a principal sees its own sessions' approvals.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from ag_ui.core import RunAgentInput, UserMessage
from fastapi import FastAPI
from starlette.requests import Request

from helix_dbos.http import SessionTokens, create_router, install_error_handlers

from .conftest import SECRET, HttpServer
from .helpers import assert_typed, read_sse, wait_status

#: The demo editor parks on a publishDocument approval straight away.
PUBLISH = "publish document doc-9"


def user_hook(request: Request, operation: str) -> Any:
    """An app's own authentication: who calls (``X-User``), for which tenant (``X-Tenant``),
    and whether as that tenant's approver (``X-Approver: 1``)."""
    user = request.headers.get("x-user")
    if user is None:
        return False
    answer: dict[str, Any] = {"ok": True, "principal": user}
    if "x-tenant" in request.headers:
        answer["tenant"] = request.headers["x-tenant"]
    if request.headers.get("x-approver") == "1":
        answer["approver"] = True
    return answer


def _start_owner(request: Request, operation: str) -> Any:
    return {
        "ok": True,
        "principal": request.headers["x-user"],
        "tenant": request.headers["x-tenant"],
    }


TOKENS = SessionTokens(SECRET, ttl_seconds=600, authorize_start=_start_owner)


@pytest.fixture(scope="module")
def tenancy(http_server: HttpServer) -> Iterator[str]:
    """A second server on the suite's runtime and loop, with the two routers; its URL."""
    app = FastAPI()
    install_error_handlers(app)
    runtime = http_server.runtime
    app.include_router(create_router(runtime, authenticate=user_hook), prefix="/users")
    app.include_router(
        create_router(runtime, authenticate=TOKENS.authenticate, token_issuer=TOKENS.issue),
        prefix="/tokens",
    )
    with http_server.serve_app(app) as url:
        yield url


@pytest.fixture
def web(tenancy: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=tenancy, timeout=20.0) as c:
        yield c


def as_user(user: str, tenant: str | None = None, *, approver: bool = False) -> dict[str, str]:
    headers = {"X-User": user}
    if tenant is not None:
        headers["X-Tenant"] = tenant
    if approver:
        headers["X-Approver"] = "1"
    return headers


def start_parked(web: httpx.Client, prefix: str, headers: dict[str, str]) -> dict[str, Any]:
    """Start a publish (it parks on its approval); the start's answer and the pending call."""
    started = web.post(
        f"{prefix}/start", json={"agentType": "editor", "message": PUBLISH}, headers=headers
    )
    assert started.status_code == 200, started.text
    out: dict[str, Any] = started.json()
    sid = out["sessionId"]
    read = {"Authorization": f"Bearer {out['token']}"} if "token" in out else headers
    view = wait_status(web, sid, "suspended_client_tool", prefix=prefix, headers=read)
    (call,) = view["pendingToolCalls"]
    return {**out, "call": call, "view": view, "read": read}


def listed(web: httpx.Client, prefix: str, headers: dict[str, str], **params: Any) -> list[str]:
    response = web.get(f"{prefix}/approvals", params=params, headers=headers)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["nextCursor"] is None
    return [a["rootSessionId"] for a in body["approvals"]]


def approve(
    web: httpx.Client, prefix: str, headers: dict[str, str], approval: dict[str, Any]
) -> httpx.Response:
    return web.post(
        f"{prefix}/submit-tool-result",
        json={
            "kind": "approval-response",
            "sessionId": approval["rootSessionId"],
            "toolCallId": approval["toolCallId"],
            "approvalId": approval["approvalId"],
            "approved": True,
            "input": approval["input"],
        },
        headers=headers,
    )


def test_a_principal_sees_its_own_an_approver_its_tenants_and_no_other_tenants(
    web: httpx.Client,
) -> None:
    acme, globex = f"acme-{uuid.uuid4().hex[:6]}", f"globex-{uuid.uuid4().hex[:6]}"
    ada = start_parked(web, "/users", as_user("ada", acme))
    bob = start_parked(web, "/users", as_user("bob", acme))
    cy = start_parked(web, "/users", as_user("cy", globex))
    assert (ada["view"]["principal"], ada["view"]["tenant"]) == ("ada", acme)

    # A principal: its own sessions' approvals (asking for another principal's: nothing).
    assert listed(web, "/users", as_user("ada", acme)) == [ada["sessionId"]]
    assert listed(web, "/users", as_user("ada", acme), principal="bob") == []
    # An approver of acme: acme's, oldest first; never globex's, even when asked for.
    acme_approver = as_user("ann", acme, approver=True)
    assert listed(web, "/users", acme_approver) == [ada["sessionId"], bob["sessionId"]]
    assert listed(web, "/users", acme_approver, principal="bob") == [bob["sessionId"]]
    assert listed(web, "/users", acme_approver, tenant=globex) == []
    page = web.get("/users/approvals", params={"limit": 1}, headers=acme_approver).json()
    (first,) = page["approvals"]
    assert first["approvalId"] == ada["call"]["approvalId"] and first["tenant"] == acme
    assert first["toolName"] == "publishDocument" and first["input"] == {"documentId": "doc-9"}
    rest = web.get(
        "/users/approvals", params={"cursor": page["nextCursor"]}, headers=acme_approver
    ).json()
    assert [a["rootSessionId"] for a in rest["approvals"]] == [bob["sessionId"]]

    # Nor can acme's approver answer, stream or read globex's session: 403, nothing stored.
    globex_call = {**cy["call"], "rootSessionId": cy["sessionId"]}
    assert_typed(approve(web, "/users", acme_approver, globex_call), 403, "forbidden")
    sse = web.get("/users/sse", params={"sessionId": cy["sessionId"]}, headers=acme_approver)
    assert_typed(sse, 403, "forbidden")
    status = web.get("/users/status", params={"sessionId": cy["sessionId"]}, headers=acme_approver)
    assert_typed(status, 403, "forbidden")
    still = wait_status(
        web, cy["sessionId"], "suspended_client_tool", prefix="/users", headers=cy["read"]
    )
    assert "submittedAt" not in still["pendingToolCalls"][0]
    assert listed(web, "/users", as_user("ivy", globex, approver=True)) == [cy["sessionId"]]

    # Its own tenant's approval it answers through the submit route, as anyone would.
    answered = approve(web, "/users", acme_approver, first)
    assert answered.status_code == 200 and answered.json()["status"] == "accepted"
    wait_status(web, ada["sessionId"], "completed", prefix="/users", headers=ada["read"])
    assert listed(web, "/users", acme_approver) == [bob["sessionId"]]
    for parked in (bob, cy):
        web.post(
            "/users/interrupt", json={"sessionId": parked["sessionId"]}, headers=parked["read"]
        )


def test_session_tokens_and_approver_tokens(web: httpx.Client) -> None:
    acme, globex = f"acme-{uuid.uuid4().hex[:6]}", f"globex-{uuid.uuid4().hex[:6]}"
    ada = start_parked(web, "/tokens", as_user("ada", acme))
    cy = start_parked(web, "/tokens", as_user("cy", globex))
    assert ada["view"]["tenant"] == acme

    # A session token lists its own session's approvals only.
    assert listed(web, "/tokens", ada["read"], sessionId=ada["sessionId"]) == [ada["sessionId"]]
    for params in ({}, {"sessionId": cy["sessionId"]}):
        refused = web.get("/tokens/approvals", params=params, headers=ada["read"])
        assert_typed(refused, 403, "forbidden")

    # An approver token for acme: acme's approvals; globex's neither listed, streamed nor
    # answered; it starts nothing.
    approver = {"Authorization": f"Bearer {TOKENS.issue_approver(acme, 'ann')}"}
    assert listed(web, "/tokens", approver) == [ada["sessionId"]]
    globex_call = {**cy["call"], "rootSessionId": cy["sessionId"]}
    assert_typed(approve(web, "/tokens", approver, globex_call), 403, "forbidden")
    sse = web.get("/tokens/sse", params={"sessionId": cy["sessionId"]}, headers=approver)
    assert_typed(sse, 403, "forbidden")
    start = web.post(
        "/tokens/start", json={"agentType": "editor", "message": "hi"}, headers=approver
    )
    assert_typed(start, 403, "forbidden")
    assert TOKENS.verify(TOKENS.issue_approver(acme)) is None  # not a session token
    expired = TOKENS.issue_approver(acme, expires_at=1)
    refused = web.get("/tokens/approvals", headers={"Authorization": f"Bearer {expired}"})
    assert_typed(refused, 401, "unauthorized")

    # Its own tenant's: it reads the stream and answers.
    frames = read_sse(web, ada["sessionId"], prefix="/tokens", headers=approver)
    assert any(f.type == "tool_approval_request" for f in frames)
    (call,) = web.get("/tokens/approvals", headers=approver).json()["approvals"]
    assert approve(web, "/tokens", approver, call).json()["status"] == "accepted"
    wait_status(web, ada["sessionId"], "completed", prefix="/tokens", headers=ada["read"])
    web.post("/tokens/interrupt", json={"sessionId": cy["sessionId"]}, headers=cy["read"])


def test_an_agui_thread_records_its_owner_and_keeps_other_tenants_out(web: httpx.Client) -> None:
    """An AG-UI run on a new thread starts the session with the hook's owner; a caller of
    another tenant cannot run on that thread."""
    tenant = f"acme-{uuid.uuid4().hex[:6]}"
    thread = f"thr_{uuid.uuid4().hex}"
    body = RunAgentInput(
        thread_id=thread,
        run_id="run_1",
        state={},
        messages=[UserMessage(id="u1", content=PUBLISH)],
        tools=[],
        context=[],
        forwarded_props={},
    ).model_dump(mode="json", by_alias=True)
    ran = web.post("/users/agui/editor", json=body, headers=as_user("ada", tenant))
    assert ran.status_code == 200, ran.text
    view = wait_status(
        web, thread, "suspended_client_tool", prefix="/users", headers=as_user("ada", tenant)
    )
    assert (view["principal"], view["tenant"]) == ("ada", tenant)
    assert listed(web, "/users", as_user("ada", tenant)) == [thread]
    other = web.post("/users/agui/editor", json=body, headers=as_user("eve", "other-tenant"))
    assert_typed(other, 403, "forbidden")
    web.post("/users/interrupt", json={"sessionId": thread}, headers=as_user("ada", tenant))


def test_the_inbox_is_documented(tenancy: str) -> None:
    doc = httpx.get(f"{tenancy}/openapi.json").json()
    operation = doc["paths"]["/users/approvals"]["get"]
    names = {p["name"] for p in operation["parameters"]}
    assert names == {
        "tool", "sessionId", "principal", "tenant", "olderThanMs", "deadlineBefore", "limit",
        "cursor",
    }  # fmt: skip
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("/ApprovalsResponse")


def test_concurrent_approvals_of_a_quorum_over_http_count_once_each(
    web: httpx.Client, tenancy: str
) -> None:
    """The demo's deleteDocument needs two approvers, neither the asker. Approvals sent at
    once over the server's sockets, by three approvers and a repeat of one, are each counted
    once: two decide it, the tool runs once, the record holds two rows with the principals
    the hook named; the asker is refused 403 ``approval_self_decision``."""
    tenant = f"acme-{uuid.uuid4().hex[:6]}"
    asker = as_user("ada", tenant)
    started = web.post(
        "/users/start", json={"agentType": "editor", "message": "delete document doc-3"},
        headers=asker,
    )  # fmt: skip
    assert started.status_code == 200, started.text
    sid = started.json()["sessionId"]
    wait_status(web, sid, "suspended_client_tool", prefix="/users", headers=asker)
    (call,) = web.get(
        "/users/approvals", params={"sessionId": sid}, headers=as_user("bob", tenant, approver=True)
    ).json()["approvals"]
    assert call["quorum"]["text"] == "0 of 2" and call["quorum"]["fourEyes"] is True
    assert_typed(approve(web, "/users", asker, call), 403, "approval_self_decision")

    def send(user: str) -> httpx.Response:
        with httpx.Client(base_url=tenancy, timeout=30.0) as own:
            return approve(own, "/users", as_user(user, tenant, approver=True), call)

    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(send, ["bob", "cy", "dee", "bob"]))
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    wait_status(web, sid, "completed", prefix="/users", headers=asker)
    frames = read_sse(web, sid, prefix="/users", headers=asker)
    ends = [f for f in frames if f.type == "tool_end"]
    (end,) = [f.data["data"] for f in ends]
    assert end["output"] == {"deleted": True, "documentId": "doc-3"}
    decided = web.get(
        "/users/approvals/decisions",
        params={"approvalId": call["approvalId"]},
        headers=as_user("eve", tenant, approver=True),
    ).json()["decisions"]
    assert sorted(d["votes"] for d in decided) == [1, 2]
    assert [d["final"] for d in decided] == [True, False]  # newest first
    assert {d["principal"] for d in decided} <= {"bob", "cy", "dee"} and len(decided) == 2
    assert {d["credential"] for d in decided} == {"hook"}
    assert end["decider"]["approvers"] == [d["principal"] for d in reversed(decided)]
