"""Our agents served as MCP tools at ``POST /mcp``, with the Tasks extension: the real SDK's
client against our endpoint over HTTP, a real runtime on Postgres and SQLite.

A task parked on an approval reads ``input_required`` with an elicitation form per call,
``tasks/update`` answers it through the ordinary submit, ``tasks/get`` then reads the result
inline; ``tasks/cancel`` interrupts; another tenant's ``tasks/get`` is refused; a turn that
hibernated before its answer continues; a client without Tasks gets ``input_required`` and
its retry with ``inputResponses`` submits.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import pytest
from fastapi import FastAPI
from mcp import MCPError
from starlette.requests import Request

from helix_dbos import ApprovalPolicy
from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.tools import define_tool
from helix_dbos.http import create_app, create_router
from helix_dbos.http.mcp_route import SESSION_TOKEN_META_KEY, MCPEndpoint, mount_mcp
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.mcp import mcp_stdio
from helix_dbos.runtime import AgentRuntime
from helix_dbos.store.decisions import DecisionQuery, list_decisions
from tests.mcp.conftest import SERVER, Journal, server_env
from tests.mcp.tasks_client import (
    cancel_task,
    connect,
    get_task,
    poll,
    served,
    update_task,
)
from tests.support.bank import ARGS, Bank, Transfer, script


def tenant_hook(request: Request, operation: str) -> Any:
    """The tenant is the ``x-tenant`` header's; no header, no access."""
    tenant = request.headers.get("x-tenant")
    return {"ok": True, "principal": f"user@{tenant}", "tenant": tenant} if tenant else False


def bank_agent(bank: Bank, hibernate_after: float | None = None) -> Any:
    transfer = define_tool(
        "transfer", "Move money", Transfer, execute=bank.transfer, require_approval=True
    )
    return define_agent(
        "banker",
        llm=ScriptedLLM(script),
        tools=[transfer],
        instructions="Moves money, after a human approves.",
        hibernate_after=hibernate_after,
    )


async def serve(rt: AgentRuntime) -> FastAPI:
    app = FastAPI()
    mount_mcp(app, MCPEndpoint(rt, authenticate=tenant_hook))
    return app


ACME = {"x-tenant": "acme"}


def user_hook(request: Request, operation: str) -> Any:
    """Tenant ``acme``; the principal is the ``x-user`` header's."""
    user = request.headers.get("x-user")
    return {"ok": True, "principal": user, "tenant": "acme"} if user else False


@pytest.mark.parametrize("hibernate_after", [None, 0], ids=["live", "hibernated"])
async def test_a_task_parked_on_an_approval_is_answered_and_read(
    make_runtime: Any, hibernate_after: float | None
) -> None:
    """``tools/call`` with Tasks answers a task at once; ``tasks/get`` reads it
    ``input_required`` with the approval as a form under the call's id; ``tasks/update``
    approves it; ``tasks/get`` reads ``completed`` with the agent's answer inline. The same
    when the turn hibernated (its workflow ended) before the answer."""
    bank = Bank()
    rt = await make_runtime([bank_agent(bank, hibernate_after)])
    async with served(await serve(rt)) as url, connect(url, ACME) as client:
        advertised = client.server_capabilities.extensions or {}
        assert "io.modelcontextprotocol/tasks" in advertised, "server/discover names it"
        listed = await client.list_tools()
        assert [t.name for t in listed.tools] == ["banker"]
        assert listed.tools[0].input_schema["required"] == ["message"]
        created = await client.session.call_tool("banker", {"message": "pay"}, allow_claimed=True)
        assert created.result_type == "task"  # type: ignore[union-attr]
        tid = created.task_id  # type: ignore[union-attr]
        session_id = tid.split("/")[0]
        parked = await poll(client, tid, "input_required")
        if hibernate_after == 0:  # the hibernate commit lands just after the park
            for _ in range(200):
                if "hibernated" in (await rt.session(session_id)).metadata:
                    break
                await asyncio.sleep(0.05)
            assert "hibernated" in (await rt.session(session_id)).metadata
        [(key, request)] = parked["inputRequests"].items()
        assert request["method"] == "elicitation/create"
        assert request["params"]["requestedSchema"]["required"] == ["approved"]
        assert '"amount": 40' in request["params"]["message"]
        assert bank.runs == []
        await update_task(client, tid, {key: {"action": "accept", "content": {"approved": True}}})
        done = await poll(client, tid, "completed")
        assert done["result"]["isError"] is False
        assert done["result"]["content"][0]["text"].startswith("ok: ")
        assert done["result"]["structuredContent"]["sessionId"] == session_id
        assert bank.runs == [ARGS], "approved once, run once"
        again = await update_task(
            client, tid, {key: {"action": "accept", "content": {"approved": True}}}
        )
        assert again["_meta"]["io.helix-dbos/answers"] == {key: "already_completed"}
        assert bank.runs == [ARGS]


async def test_a_denial_through_tasks_update_reaches_the_model(make_runtime: Any) -> None:
    """Declining the form denies the call with a reason; the tool never runs."""
    bank = Bank()
    rt = await make_runtime([bank_agent(bank)])
    async with served(await serve(rt)) as url, connect(url, ACME) as client:
        created = await client.session.call_tool("banker", {"message": "pay"}, allow_claimed=True)
        tid = created.task_id  # type: ignore[union-attr]
        [key] = (await poll(client, tid, "input_required"))["inputRequests"]
        reason = {"approved": False, "reason": "too much"}
        await update_task(client, tid, {key: {"action": "accept", "content": reason}})
        done = await poll(client, tid, "completed")
        assert "approval_denied" in done["result"]["content"][0]["text"]
        assert "too much" in done["result"]["content"][0]["text"]
        assert bank.runs == []


async def test_tasks_cancel_interrupts_and_another_tenant_is_refused(make_runtime: Any) -> None:
    """Another tenant's ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` are refused
    (403, nothing changes); the owner's ``tasks/cancel`` interrupts: ``cancelled``."""
    bank = Bank()
    rt = await make_runtime([bank_agent(bank)])
    async with served(await serve(rt)) as url, connect(url, ACME) as client:
        created = await client.session.call_tool("banker", {"message": "pay"}, allow_claimed=True)
        tid = created.task_id  # type: ignore[union-attr]
        [key] = (await poll(client, tid, "input_required"))["inputRequests"]
        async with connect(url, {"x-tenant": "globex"}) as other:
            for attempt in (
                get_task(other, tid),
                update_task(other, tid, {key: {"action": "accept", "content": {"approved": True}}}),
                cancel_task(other, tid),
            ):
                with pytest.raises(MCPError) as refused:
                    await attempt
                assert refused.value.error.data == {"code": "forbidden", "status": 403}
        async with connect(url, {}) as nobody:
            with pytest.raises(MCPError) as refused:
                await get_task(nobody, tid)
            assert refused.value.error.data == {"code": "unauthorized", "status": 401}
        assert (await get_task(client, tid))["status"] == "input_required"
        await cancel_task(client, tid)
        cancelled = await poll(client, tid, "cancelled")
        assert "result" not in cancelled
        assert bank.runs == []


async def test_a_client_without_tasks_gets_input_required_and_its_retry_submits(
    make_runtime: Any,
) -> None:
    """Without the extension the call waits: the parked approval comes back as
    ``input_required``; the SDK's client asks its elicitation callback and calls again
    with ``inputResponses`` and our ``requestState``, which submits; the answer is the
    agent's reply."""
    bank = Bank()
    rt = await make_runtime([bank_agent(bank)])
    asked: list[str] = []

    async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approved": True})

    app = await serve(rt)
    async with (
        served(app) as url,
        connect(url, ACME, tasks=False, elicitation_callback=approve) as client,
    ):
        result = await client.call_tool("banker", {"message": "pay"})
    assert len(asked) == 1 and "transfer" in asked[0]
    assert result.is_error is False
    assert result.content[0].text.startswith("ok: ")  # type: ignore[union-attr]
    assert bank.runs == [ARGS]


async def test_serve_mounts_mcp_behind_its_session_tokens(db_url: str) -> None:
    """The standalone server (``create_app``, what ``helix-dbos serve`` runs) serves
    ``/mcp``: a new task carries its session's token, as ``/start`` answers it; ``tasks/get``
    with that token reads the task, without it is refused 401."""
    bank = Bank()
    settings = HelixSettings(
        database_url=db_url, executor_id="test-exec", application_version="test"
    )
    app = create_app(AgentRuntime([bank_agent(bank)], settings), auth_secret="s" * 32)
    async with served(app) as url:
        async with connect(url, {}) as client:
            created = await client.session.call_tool(
                "banker", {"message": "pay"}, allow_claimed=True
            )
            tid = created.task_id  # type: ignore[union-attr]
            token = created.meta[SESSION_TOKEN_META_KEY]  # type: ignore[index]
            with pytest.raises(MCPError) as refused:
                await get_task(client, tid)
            assert refused.value.error.data == {"code": "unauthorized", "status": 401}
        async with connect(url, {"Authorization": f"Bearer {token}"}) as owner:
            parked = await poll(owner, tid, "input_required")
            [key] = parked["inputRequests"]
            await update_task(
                owner, tid, {key: {"action": "accept", "content": {"approved": True}}}
            )
            assert (await poll(owner, tid, "completed"))["result"]["isError"] is False
    assert bank.runs == [ARGS]


def confirming(request: LLMRequest) -> LLMResponse:
    """Calls the MCP test server's ``confirm``, then says what it read."""
    last = request.messages[-1]
    if last.role == "user":
        return call(request, ("files__confirm", {}))
    return reply(f"{last.error_code or 'ok'}: {last.content}")


async def test_a_task_waiting_on_an_mcp_tools_form_forwards_it(
    make_runtime: Any, journal: Journal
) -> None:
    """A served turn parked on an MCP server's ``input_required`` is a task in
    ``input_required`` carrying that server's own form; the ``tasks/update`` response goes
    back to the server's tool as its ``inputResponses``."""
    files = mcp_stdio("files", SERVER, env=server_env(journal, "files"))
    agent = define_agent("assistant", llm=ScriptedLLM(confirming), tools=[files])
    rt = await make_runtime([agent])
    async with served(await serve(rt)) as url, connect(url, ACME) as client:
        created = await client.session.call_tool("assistant", {"message": "go"}, allow_claimed=True)
        tid = created.task_id  # type: ignore[union-attr]
        [(key, form)] = (await poll(client, tid, "input_required"))["inputRequests"].items()
        assert form["params"]["message"] == "Sure?", "the server's own form"
        await update_task(client, tid, {key: {"action": "accept", "content": {"ok": True}}})
        done = await poll(client, tid, "completed")
    assert done["result"]["content"][0]["text"] == 'ok: {"result": "confirmed: {\\"ok\\": true}"}'
    assert [c["args"] for c in journal.calls("confirm")] == [
        {"answered": []},
        {"answered": ["sure"]},
    ]


async def test_an_app_including_our_router_serves_mcp(make_runtime: Any) -> None:
    """``create_router`` serves ``/mcp`` too: an app that includes it (its own app, its own
    lifespan) gets the MCP endpoint behind the router's hook, its transport run by the
    router's lifespan; ``mcp=False`` leaves it out."""
    bank = Bank()
    rt = await make_runtime([bank_agent(bank)])
    app = FastAPI()
    app.include_router(create_router(rt, authenticate=tenant_hook))
    async with served(app) as url, connect(url, ACME) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["banker"]
        created = await client.session.call_tool("banker", {"message": "pay"}, allow_claimed=True)
        tid = created.task_id  # type: ignore[union-attr]
        [key] = (await poll(client, tid, "input_required"))["inputRequests"]
        await update_task(client, tid, {key: {"action": "accept", "content": {"approved": True}}})
        assert (await poll(client, tid, "completed"))["result"]["isError"] is False
        async with connect(url, {}) as nobody:
            with pytest.raises(MCPError) as refused:
                await nobody.list_tools()
            assert refused.value.error.data == {"code": "unauthorized", "status": 401}
    assert bank.runs == [ARGS]
    without = FastAPI()
    without.include_router(create_router(rt, authenticate=tenant_hook, mcp=False))
    assert "/mcp" not in {getattr(r, "path", None) for r in without.routes}


async def test_tasks_get_shows_an_approvals_quorum(make_runtime: Any) -> None:
    """An approval that needs two approvers: ``tasks/get`` shows its progress (``0 of 2``,
    then ``1 of 2`` with the approver) in the form's message and its ``_meta``; each
    ``tasks/update`` is counted for the principal the hook named; the second approver's
    decides, and the tool runs once."""
    bank = Bank()
    policy = ApprovalPolicy(quorum=2)
    transfer = define_tool(
        "transfer",
        "Move money",
        Transfer,
        execute=bank.transfer,
        require_approval=True,
        approval_policy=policy,
    )
    agent = define_agent("banker", llm=ScriptedLLM(script), tools=[transfer])
    rt = await make_runtime([agent])
    app = FastAPI()
    mount_mcp(app, MCPEndpoint(rt, authenticate=user_hook))
    approve = {"action": "accept", "content": {"approved": True}}
    async with (
        served(app) as url,
        connect(url, {"x-user": "ann"}) as ann,
        connect(url, {"x-user": "bob"}) as bob,
    ):
        created = await ann.session.call_tool("banker", {"message": "pay"}, allow_claimed=True)
        tid = created.task_id  # type: ignore[union-attr]
        [(key, form)] = (await poll(ann, tid, "input_required"))["inputRequests"].items()
        quorum = form["params"]["_meta"]["io.helix-dbos/quorum"]
        assert quorum == {"approvals": 0, "needed": 2, "approvers": [], "text": "0 of 2"}
        assert form["params"]["message"].endswith("(0 of 2 approvals)")
        counted = await update_task(ann, tid, {key: approve})
        assert counted["_meta"]["io.helix-dbos/answers"] == {key: "accepted"}
        [(same, form)] = (await poll(bob, tid, "input_required"))["inputRequests"].items()
        assert same == key
        quorum = form["params"]["_meta"]["io.helix-dbos/quorum"]
        assert quorum == {"approvals": 1, "needed": 2, "approvers": ["ann"], "text": "1 of 2"}
        assert form["params"]["message"].endswith("(1 of 2 approvals)")
        assert bank.runs == []
        await update_task(bob, tid, {key: approve})
        assert (await poll(bob, tid, "completed"))["result"]["isError"] is False
    assert bank.runs == [ARGS]
    page = await list_decisions(rt.store, DecisionQuery(session_id=tid.split("/")[0]))
    assert sorted((d.principal, d.credential) for d in page.decisions) == [
        ("ann", "hook"),
        ("bob", "hook"),
    ]
