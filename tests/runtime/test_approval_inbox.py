"""Who owns a session, and the approval inbox, on real turns (Postgres and SQLite).

A session records the principal and the tenant it was started under; its sub-agents inherit
them; ``status`` shows them. ``AgentRuntime.approvals`` lists the approvals waiting across
sessions, oldest first, filtered and paged; an approval leaves it the moment it is answered,
denied, interrupted or abandoned, and when it expires.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.tools import define_tool
from helix_dbos.errors import RequestValidationError
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime
from helix_dbos.store.approvals import PendingApproval
from tests.runtime.approval_steps import decide
from tests.support.bank import Bank, banker, script

#: Bounds for what happens on its own (an expiry, a turn ending): far above what it needs.
SETTLE_SECONDS = 30.0


class Sign(BaseModel):
    document: str


def clerk_script(request: LLMRequest) -> LLMResponse:
    if request.messages[-1].role == "user":
        return call(request, ("sign", {"document": "lease"}))
    return reply("signed" if not request.messages[-1].is_error else "not signed")


def boss_script(request: LLMRequest) -> LLMResponse:
    if request.messages[-1].role == "user":
        return call(request, ("subagent__clerk", {"message": "sign the lease"}))
    return reply("done")


def office() -> Any:
    """``boss`` delegates to ``clerk``, whose ``sign`` needs a human's approval."""
    clerk = define_agent(
        "clerk",
        llm=ScriptedLLM(clerk_script),
        tools=[
            define_tool("sign", "Sign", Sign, execute=lambda a: {"ok": True}, require_approval=True)
        ],
    )
    return define_agent("boss", llm=ScriptedLLM(boss_script), subagents=[clerk])


def keys(page: list[PendingApproval]) -> list[str]:
    return [a.root_session_id for a in page]


async def answer(rt: AgentRuntime, a: PendingApproval, approved: bool, **more: Any) -> Any:
    """Decide ``a`` with no decider (an unauthenticated runtime's submit)."""
    return await decide(rt, a, None, approved, **more)


async def until_empty(rt: AgentRuntime) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_SECONDS
    while (await rt.approvals()).approvals:
        assert loop.time() < deadline, (await rt.approvals()).approvals
        await asyncio.sleep(0.05)


async def test_owners_and_the_inbox_on_real_turns(make_runtime: Any) -> None:
    rt = await make_runtime([banker(Bank(), ScriptedLLM(script)), office()])
    started: dict[str, str] = {}
    for name, agent, message, principal, tenant in (
        ("paid", "banker", "pay", "ada", "acme"),
        ("denied", "banker", "pay", "bob", "globex"),
        ("tree", "boss", "go", "ada", "acme"),
        ("stopped", "banker", "pay", "dee", "acme"),
        ("abandoned", "banker", "pay", "eve", None),
        # Last: its approval lapses seconds after it parks, and the inbox must still show it.
        ("quick", "banker", "pay quickly", "cy", "acme"),
    ):
        handle = await rt.start(agent, message, principal=principal, tenant=tenant)
        await rt.wait_for_pending(handle.session_id)
        started[name] = handle.session_id
    sid = started

    # Who owns a session: recorded, shown by status, inherited by the sub-agent.
    view = await rt.status(sid["paid"])
    assert (view["principal"], view["tenant"]) == ("ada", "acme")
    assert "tenant" not in await rt.status(sid["abandoned"])
    (child,) = await rt.store.descendants(sid["tree"])
    assert (child.principal, child.tenant) == ("ada", "acme")

    # The inbox: every approval, oldest first, with its fields.
    page = await rt.approvals()
    assert keys(page.approvals) == list(sid.values()) and page.next_cursor is None
    by_root = {a.root_session_id: a for a in page.approvals}
    tree = by_root[sid["tree"]]
    assert (tree.session_id, tree.tool_name, tree.input) == (
        child.session_id,
        "sign",
        {"document": "lease"},
    )
    assert (tree.principal, tree.tenant, tree.agent_type) == ("ada", "acme", "clerk")
    paid = by_root[sid["paid"]]
    status_call = view["pendingToolCalls"][0]
    assert (paid.approval_id, paid.tool_call_id) == (
        status_call["approvalId"],
        status_call["toolCallId"],
    )
    assert paid.deadline_at == status_call["deadlineAt"] and paid.age_ms >= 0
    created = [a.created_at for a in page.approvals]
    assert created == sorted(created)

    # Filters, and pages through a cursor.
    assert keys((await rt.approvals(tenant="globex")).approvals) == [sid["denied"]]
    assert keys((await rt.approvals(principal="ada")).approvals) == [sid["paid"], sid["tree"]]
    assert keys((await rt.approvals(tool="quick_transfer")).approvals) == [sid["quick"]]
    assert keys((await rt.approvals(session_id=sid["tree"])).approvals) == [sid["tree"]]
    assert keys((await rt.approvals(session_id=child.session_id)).approvals) == [sid["tree"]]
    soon = paid.deadline_at - 1
    assert keys((await rt.approvals(deadline_before=soon)).approvals) == [sid["quick"]]
    assert (await rt.approvals(older_than=3600)).approvals == []
    first = await rt.approvals(limit=4)
    second = await rt.approvals(limit=4, cursor=first.next_cursor)
    assert keys(first.approvals) + keys(second.approvals) == list(sid.values())
    assert second.next_cursor is None
    with pytest.raises(RequestValidationError):
        await rt.approvals(limit=0)

    # Each way out takes the approval out of the inbox in the write that ends it: an answer,
    # a denial and an interrupt before they return; an abandon once the parked turn takes the
    # new message (it closes the calls, then the message); an expiry when the deadline lapses.
    assert (await answer(rt, paid, True)).status == "accepted"
    assert (await answer(rt, by_root[sid["denied"]], False, reason="no")).status == "accepted"
    assert (await answer(rt, tree, True)).status == "accepted"  # answered on the root
    await rt.interrupt(sid["stopped"])
    left = set(keys((await rt.approvals()).approvals))
    assert left <= {sid["quick"], sid["abandoned"]} and sid["abandoned"] in left
    await rt.resume(sid["abandoned"], "with_message", "never mind", abandon_pending=True)
    await until_empty(rt)
    for name in ("paid", "denied", "tree"):
        assert (await rt.wait(sid[name], timeout=SETTLE_SECONDS))["status"] == "completed"


async def test_an_owner_must_be_a_short_string(tmp_path: Any) -> None:
    """Refused before anything is read or written (the runtime is not even launched)."""
    settings = HelixSettings(database_url=f"sqlite:///{tmp_path}/never.sqlite")
    rt = AgentRuntime([banker(Bank(), ScriptedLLM(script))], settings)
    for bad in ({"principal": ""}, {"tenant": "x" * 513}, {"principal": 7}, {"tenant": "a\x00b"}):
        with pytest.raises(RequestValidationError):
            await rt.start("banker", "pay", **bad)


async def test_an_owner_with_a_nul_is_refused_typed_on_postgres(make_runtime: Any) -> None:
    """Postgres cannot store a NUL in a text column: the start is refused as bad input
    (``validation_error``, nothing written), not failed by the database."""
    rt = await make_runtime([banker(Bank(), ScriptedLLM(script))])
    with pytest.raises(RequestValidationError) as caught:
        await rt.start("banker", "pay", principal="ada\x00")
    assert caught.value.details == {"cause": "principal"}
    assert (await rt.start("banker", "pay", principal="ada")).session_id
