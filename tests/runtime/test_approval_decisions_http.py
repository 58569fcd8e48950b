"""Approvals under policies over the HTTP routes (Postgres and SQLite): the decider comes from
the authenticate hook or the token, never from the body; four eyes answer 403 with a typed
code; concurrent approvals by different approvers count each once and run the tool once;
``GET /approvals/decisions`` lists the record, scoped like the inbox.

The app is ``create_router`` over the test's runtime, called in this process through its ASGI
interface (the whole FastAPI stack: validation, the hook, the error handlers).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.requests import Request

from helix_dbos.errors import ConfigError
from helix_dbos.http import SessionTokens, create_router, install_error_handlers
from helix_dbos.runtime import AgentRuntime
from tests.support.asgi import client_for
from tests.support.bank import ARGS, Bank
from tests.support.treasury import treasurer

SECRET = "s" * 40
#: Bounds for what happens on its own (a turn ending): far above what it needs.
SETTLE_SECONDS = 30.0


def hook(request: Request, operation: str) -> Any:
    """The app's authentication: ``X-User`` of ``X-Tenant``, approver with ``X-Roles``."""
    user = request.headers.get("x-user")
    if user is None:
        return False
    answer: dict[str, Any] = {"ok": True, "principal": user, "tenant": "acme"}
    roles = request.headers.get("x-roles")
    if roles:
        answer.update(approver=True, roles=roles.split(","))
    return answer


def app_for(runtime: AgentRuntime, tokens: SessionTokens) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(create_router(runtime, authenticate=hook), prefix="/users")
    app.include_router(
        create_router(runtime, authenticate=tokens.authenticate, token_issuer=tokens.issue),
        prefix="/tokens",
    )
    return app


def who(user: str, roles: str | None = "finance") -> dict[str, str]:
    headers = {"X-User": user}
    if roles:
        headers["X-Roles"] = roles
    return headers


async def start(web: httpx.AsyncClient, tool: str, owner: str = "ada") -> dict[str, Any]:
    started = await web.post(
        "/users/start", json={"agentType": "treasurer", "message": tool}, headers=who(owner, None)
    )
    assert started.status_code == 200, started.text
    sid = started.json()["sessionId"]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_SECONDS
    while True:
        listed = await web.get("/users/approvals", params={"sessionId": sid}, headers=who("bob"))
        assert listed.status_code == 200, listed.text
        if listed.json()["approvals"]:
            (approval,) = listed.json()["approvals"]
            return dict(approval)
        assert loop.time() < deadline
        await asyncio.sleep(0.05)


def answer(approval: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "kind": "approval-response",
        "sessionId": approval["rootSessionId"],
        "toolCallId": approval["toolCallId"],
        "approvalId": approval["approvalId"],
        "approved": True,
        **more,
    }


async def ended(rt: AgentRuntime, session_id: str) -> dict[str, Any]:
    await rt.wait(session_id, timeout=SETTLE_SECONDS)
    events = await rt.store.read_events(session_id, 0)
    (end,) = [e.data for e in events if e.type == "tool_end"]
    return end


async def test_the_decider_is_the_credentials_and_four_eyes_refuse(make_runtime: Any) -> None:
    bank = Bank()
    rt = await make_runtime([treasurer(bank)])
    async with client_for(app_for(rt, SessionTokens(SECRET))) as web:
        a = await start(web, "four_eyes", owner="ada")
        # A body that names another decider is refused as a body (no such field), and
        # stores nothing; without it, ada's own approval is refused, typed.
        for forged in (answer(a, principal="bob"), answer(a, decider={"principal": "bob"})):
            refused = await web.post("/users/submit-tool-result", json=forged, headers=who("ada"))
            assert (refused.status_code, refused.json()["code"]) == (400, "validation_error")
        own = await web.post("/users/submit-tool-result", json=answer(a), headers=who("ada"))
        assert own.status_code == 403 and own.json()["code"] == "approval_self_decision"
        # The inbox does not offer it to ada, even as an approver of her tenant.
        mine = await web.get("/users/approvals", headers=who("ada"))
        assert mine.json()["approvals"] == []
        nothing = await web.get("/users/approvals/decisions", headers=who("ada", None))
        assert nothing.json()["decisions"] == []
        taken = await web.post("/users/submit-tool-result", json=answer(a), headers=who("bob"))
        assert taken.status_code == 200 and taken.json()["status"] == "accepted", taken.text
        end = await ended(rt, a["rootSessionId"])
        assert end["decider"] == {
            "principal": "bob",
            "tenant": "acme",
            "credential": "hook",
            "roles": ["finance"],
        }
        listed = await web.get(
            "/users/approvals/decisions", params={"approvalId": a["approvalId"]}, headers=who("cy")
        )
        assert listed.status_code == 200, listed.text
        (row,) = listed.json()["decisions"]
        assert (row["principal"], row["tenant"], row["credential"], row["outcome"]) == (
            "bob",
            "acme",
            "hook",
            "approved",
        )
        # Scoped like the inbox: a principal who is no approver sees its own sessions' only.
        other = await web.get("/users/approvals/decisions", headers=who("zed", None))
        assert other.json()["decisions"] == []
        owner = await web.get("/users/approvals/decisions", headers=who("ada", None))
        assert [d["approvalId"] for d in owner.json()["decisions"]] == [a["approvalId"]]
    assert bank.runs == [ARGS]


async def test_concurrent_approvals_count_once_each_and_run_once(make_runtime: Any) -> None:
    bank = Bank()
    rt = await make_runtime([treasurer(bank)])
    async with client_for(app_for(rt, SessionTokens(SECRET))) as web:
        a = await start(web, "two_of_three")
        body = answer(a)
        answers = await asyncio.gather(
            *(
                web.post("/users/submit-tool-result", json=body, headers=who(user))
                for user in ("bob", "cy", "dee", "bob", "cy")
            )
        )
        assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
        await ended(rt, a["rootSessionId"])
        listed = await web.get(
            "/users/approvals/decisions", params={"approvalId": a["approvalId"]}, headers=who("x")
        )
        rows = listed.json()["decisions"]
    # Two approvals reached the quorum; the third (if it came after) found the call decided.
    counted = sorted(r["votes"] for r in rows)
    assert counted == [1, 2] and sum(r["final"] for r in rows) == 1
    assert len({r["principal"] for r in rows}) == 2
    assert bank.runs == [ARGS]


async def test_an_approver_token_is_recorded_as_such(make_runtime: Any) -> None:
    bank = Bank()
    rt = await make_runtime([treasurer(bank)])
    tokens = SessionTokens(SECRET)
    async with client_for(app_for(rt, tokens)) as web:
        a = await start(web, "four_eyes", owner="ada")
        token = tokens.issue_approver("acme", principal="ann")
        taken = await web.post(
            "/tokens/submit-tool-result",
            json=answer(a),
            headers={"Authorization": f"Bearer {token}"},
        )
        assert taken.status_code == 200, taken.text
        end = await ended(rt, a["rootSessionId"])
    assert end["decider"] == {"principal": "ann", "tenant": "acme", "credential": "approver_token"}


async def test_approver_tokens_with_roles_reach_a_quorum_restricted_to_roles(
    make_runtime: Any,
) -> None:
    """Two approver tokens holding the role the policy names satisfy its quorum of two, and
    each decision records the token's principal and roles; a token without the role (or with
    another) is refused ``approval_not_eligible`` and counts for nothing."""
    bank = Bank()
    rt = await make_runtime([treasurer(bank)])
    tokens = SessionTokens(SECRET)

    def bearer(principal: str, *roles: str) -> dict[str, str]:
        token = tokens.issue_approver("acme", principal, roles=roles)
        return {"Authorization": f"Bearer {token}"}

    async with client_for(app_for(rt, tokens)) as web:
        a = await start(web, "two_of_three", owner="ada")
        for refused_as in (bearer("rex"), bearer("ray", "legal")):
            refused = await web.post(
                "/tokens/submit-tool-result", json=answer(a), headers=refused_as
            )
            assert refused.status_code == 403, refused.text
            assert refused.json()["code"] == "approval_not_eligible"
            assert refused.json()["roles"] == ["finance"]
        first = await web.post(
            "/tokens/submit-tool-result", json=answer(a), headers=bearer("ann", "finance")
        )
        assert first.status_code == 200, first.text
        assert first.json()["continuation"]["kind"] == "awaiting_quorum"
        # The inbox, read with an approver token, shows the progress.
        listed = await web.get("/tokens/approvals", headers=bearer("cy", "finance"))
        (waiting,) = listed.json()["approvals"]
        assert waiting["quorum"]["text"] == "1 of 2" and waiting["quorum"]["approvers"] == ["ann"]
        second = await web.post(
            "/tokens/submit-tool-result",
            json=answer(a),
            headers=bearer("bo", "finance", "audit"),
        )
        assert second.status_code == 200, second.text
        end = await ended(rt, a["rootSessionId"])
        rows = (
            await web.get(
                "/users/approvals/decisions",
                params={"approvalId": a["approvalId"]},
                headers=who("x"),
            )
        ).json()["decisions"]
    assert bank.runs == [ARGS]
    assert end["decider"]["credential"] == "approver_token"
    assert end["decider"]["approvers"] == ["ann", "bo"]
    assert sorted((r["principal"], tuple(r["roles"]), r["votes"]) for r in rows) == [
        ("ann", ("finance",), 1),
        ("bo", ("audit", "finance"), 2),
    ]
    assert {r["credential"] for r in rows} == {"approver_token"}


def test_approver_token_claims_are_checked_when_issued() -> None:
    tokens = SessionTokens(SECRET)
    claims = tokens.verify_approver(tokens.issue_approver("acme", "ann", roles=["cfo", "finance"]))
    assert claims == ("acme", "ann", ("cfo", "finance"))
    assert tokens.verify_approver(tokens.issue_approver("acme")) == ("acme", None, ())
    for bad in ("finance", ["finance", ""], [3]):
        with pytest.raises(ConfigError, match="roles"):
            tokens.issue_approver("acme", "ann", roles=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="principal"):
        tokens.issue_approver("acme", "")
