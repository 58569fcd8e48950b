"""Approval policies and the decision record on real turns (Postgres and SQLite).

Four eyes, a 2-of-3 quorum (counted once per approver, one denial denies, an edit restarts it),
an escalation to a further group, and the expiry of an unreached quorum under each
``on_timeout``; every answer (and each expiry's outcome) leaves one row in the decision record,
written with the answer, naming the decider given to ``submit_tool_result``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from ag_ui.core import CustomEvent

from helix_dbos.core.approval_policy import ApprovalPolicy, Decider
from helix_dbos.core.session import args_digest
from helix_dbos.core.tools import define_tool
from helix_dbos.errors import ApprovalForbiddenError, ApprovalMismatchError, ToolDefinitionError
from helix_dbos.http.agui_events import AguiRun
from helix_dbos.http.ui_stream import UIMessageStream
from helix_dbos.runtime import AgentRuntime, Notification, Submission
from helix_dbos.store.approvals import PendingApproval
from helix_dbos.store.decisions import DecisionQuery, list_decisions
from helix_dbos.testing import capture_log_events
from tests.runbook_sql import runbook_sql
from tests.runtime.approval_steps import SETTLE_SECONDS, decide, parked, tool_end
from tests.support.bank import ARGS, Bank, Transfer
from tests.support.treasury import finance, treasurer


async def record(rt: AgentRuntime, a: PendingApproval) -> list[dict[str, Any]]:
    """The approval's decisions, oldest first."""
    page = await list_decisions(rt.store, DecisionQuery(approval_id=a.approval_id))
    return [d.dump() for d in reversed(page.decisions)]


async def test_four_eyes_refuses_the_sessions_own_principal(make_runtime: Any) -> None:
    bank = Bank()
    rt = await make_runtime([treasurer(bank)])
    resolved: list[Notification] = []
    rt.on_resolved(resolved.append)
    rt.configure_notifications(poll_seconds=0.1)
    a = await parked(rt, "four_eyes", owner="ada")
    with pytest.raises(ApprovalForbiddenError) as refused:
        await decide(rt, a, finance("ada"))
    assert (refused.value.code, refused.value.http_status) == ("approval_self_decision", 403)
    with pytest.raises(ApprovalForbiddenError) as anonymous:
        await decide(rt, a, Decider())  # no principal: it cannot be told apart from ada
    assert anonymous.value.code == "approval_decider_unknown"
    # A request of several answers is checked whole first: the same refusal, nothing stored.
    own = Submission(
        a.root_session_id,
        a.tool_call_id,
        "approval-response",
        approval_id=a.approval_id,
        approved=True,
        decider=finance("ada"),
    )
    with pytest.raises(ApprovalForbiddenError):
        await rt.precheck_submit(own)
    # The inbox does not offer it to ada; bob sees it.
    assert (await rt.approvals(viewer="ada")).approvals == []
    assert [x.approval_id for x in (await rt.approvals(viewer="bob")).approvals] == [a.approval_id]
    assert await record(rt, a) == []  # a refusal records nothing
    with capture_log_events() as logged:
        assert (await decide(rt, a, finance("bob"))).status == "accepted"
    (line,) = [e for e in logged if e["event"] == "approval.decided"]
    assert (line["level"], line["principal"], line["credential"], line["final"]) == (
        "INFO",
        "bob",
        "hook",
        True,
    )
    end = await tool_end(rt, a.root_session_id)
    assert end["decider"] == {
        "principal": "bob",
        "tenant": "acme",
        "credential": "hook",
        "roles": ["finance"],
    }
    assert bank.runs == [ARGS]
    while not resolved:
        await asyncio.sleep(0.05)
    (note,) = resolved  # the on_resolved hooks are told who decided
    assert (note.outcome, note.decider) == ("answered", end["decider"])
    (row,) = await record(rt, a)
    assert (row["outcome"], row["final"], row["principal"], row["credential"]) == (
        "approved",
        True,
        "bob",
        "hook",
    )
    assert (row["ownerPrincipal"], row["argsDigest"]) == ("ada", a.args_digest)


async def test_two_of_three_counts_each_approver_once(make_runtime: Any, db_url: str) -> None:
    bank = Bank()
    rt = await make_runtime([treasurer(bank)])
    a = await parked(rt, "two_of_three")
    first = await decide(rt, a, finance("bob"))
    assert (first.status, first.continuation.kind) == ("accepted", "awaiting_quorum")
    again = await decide(rt, a, finance("bob"))  # the same approver: counted once
    assert again.continuation.kind == "awaiting_quorum"
    (listed,) = (await rt.approvals(session_id=a.root_session_id)).approvals
    assert listed.quorum is not None
    assert (listed.quorum["text"], listed.quorum["approvers"]) == ("1 of 2", ["bob"])
    assert (await rt.status(a.root_session_id))["status"] == "suspended_client_tool"
    with pytest.raises(ApprovalForbiddenError) as no_role:
        await decide(rt, a, finance("eve", "sales"))
    assert no_role.value.code == "approval_not_eligible"
    assert bank.runs == []
    second = await decide(rt, a, finance("cy"))
    assert second.continuation.kind in ("new_run", "caller_resumes")
    end = await tool_end(rt, a.root_session_id)
    assert end["decider"]["principal"] == "cy" and end["decider"]["approvers"] == ["bob", "cy"]
    # The stream showed the policy with the request, and the quorum's progress once.
    events = await rt.store.read_events(a.root_session_id, 0)
    (request,) = [e.data for e in events if e.type == "tool_approval_request"]
    assert request["policy"] == {"fourEyes": True, "quorum": 2, "roles": ["finance"]}
    (progress,) = [e.data for e in events if e.type == "tool_approval_counted"]
    assert (progress["approvals"], progress["needed"], progress["approvers"]) == (1, 2, ["bob"])
    chunks = UIMessageStream("m").translate({"type": "tool_approval_counted", "data": progress})
    assert chunks[-1] == {"type": "data-approval-quorum", "data": progress}
    (custom,) = AguiRun("t", "r").translate({"type": "tool_approval_counted", "data": progress})
    assert isinstance(custom, CustomEvent)
    assert (custom.name, custom.value) == ("helix.approval_quorum", progress)
    assert bank.runs == [ARGS]
    rows = await record(rt, a)
    assert [(r["principal"], r["votes"], r["quorum"], r["final"]) for r in rows] == [
        ("bob", 1, 2, False),
        ("cy", 2, 2, True),
    ]
    if db_url.startswith("postgresql"):
        # The runbook's "who approved what, this month" finds both, newest first.
        _, sql = runbook_sql()["decisions-this-month"]
        with psycopg.connect(db_url) as conn:
            month = conn.execute(sql).fetchall()
        assert [(r[2], r[3], r[4], r[5], r[7], r[9]) for r in month] == [
            (a.approval_id, "approved", True, 2, "cy", "hook"),
            (a.approval_id, "approved", False, 1, "bob", "hook"),
        ]


async def test_one_denial_denies_under_a_quorum(make_runtime: Any) -> None:
    bank = Bank()
    rt = await make_runtime([treasurer(bank)])
    a = await parked(rt, "two_of_three")
    await decide(rt, a, finance("bob"))
    assert (await decide(rt, a, finance("cy"), False, reason="too much")).status == "accepted"
    end = await tool_end(rt, a.root_session_id)
    assert (end["outcome"], end["decider"]["principal"]) == ("denied", "cy")
    assert bank.runs == []
    rows = await record(rt, a)
    assert [(r["outcome"], r["final"], r["reason"]) for r in rows] == [
        ("approved", False, None),
        ("denied", True, "too much"),
    ]


async def test_an_edit_restarts_the_quorum_on_the_new_arguments(make_runtime: Any) -> None:
    bank = Bank()
    rt = await make_runtime([treasurer(bank)])
    a = await parked(rt, "two_of_three")
    edited = {"amount": 10, "to": "alice"}
    await decide(rt, a, finance("bob"))
    counted = await decide(rt, a, finance("cy"), edited_input=edited)
    assert counted.continuation.kind == "awaiting_quorum"  # bob's approval was of other args
    (listed,) = (await rt.approvals(session_id=a.root_session_id)).approvals
    assert listed.quorum is not None and listed.quorum["approvers"] == ["cy"]
    # The inbox offers the edited arguments: what an approver approves now.
    assert (listed.input, listed.args_digest) == (edited, args_digest(a.tool_name, edited))
    assert listed.quorum["edited"] is True
    with pytest.raises(ApprovalMismatchError):  # shown the call's own arguments: stale
        await decide(rt, a, finance("bob"), shown_input=ARGS)
    await decide(rt, a, finance("bob"), shown_input=edited)
    await tool_end(rt, a.root_session_id)
    assert bank.runs == [edited]
    new = args_digest(a.tool_name, edited)
    rows = await record(rt, a)
    assert [(r["principal"], r["outcome"], r["editedDigest"], r["votes"]) for r in rows] == [
        ("bob", "approved", None, 1),
        ("cy", "edited", new, 1),
        ("bob", "approved", new, 2),
    ]
    assert {r["argsDigest"] for r in rows} == {a.args_digest}


async def escalated(rt: AgentRuntime, a: PendingApproval) -> bool:
    (listed,) = (await rt.approvals(session_id=a.root_session_id)).approvals
    assert listed.quorum is not None
    return bool(listed.quorum["escalated"])


async def test_escalation_lets_a_further_group_answer(make_runtime: Any) -> None:
    bank = Bank()
    rt = await make_runtime([treasurer(bank)])
    told: list[Notification] = []
    rt.on_escalated(told.append)
    rt.configure_notifications(poll_seconds=0.1)
    a = await parked(rt, "escalating")
    assert a.quorum is not None and a.quorum["escalated"] is False
    with pytest.raises(ApprovalForbiddenError):
        await decide(rt, a, finance("cfo-ann", "cfo"))  # not yet
    escalate_at = a.quorum["escalateAt"]
    while not await escalated(rt, a) or not told:
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # a second delivery would come within the poll
    (note,) = told  # the hook fired once, with the escalation
    assert (note.kind, note.approval_id, note.data["escalateTo"]) == (
        "escalated",
        a.approval_id,
        ["cfo"],
    )
    assert note.at == escalate_at
    assert (await decide(rt, a, finance("cfo-ann", "cfo"))).status == "accepted"
    end = await tool_end(rt, a.root_session_id)
    assert end["decider"]["roles"] == ["cfo"]
    (row,) = await record(rt, a)
    assert row["decidedAt"] >= escalate_at and bank.runs == [ARGS]
    assert len(told) == 1


async def test_an_escalation_answered_before_it_is_due_tells_nobody(make_runtime: Any) -> None:
    rt = await make_runtime([treasurer(Bank())])
    told: list[Notification] = []
    rt.on_escalated(told.append)
    rt.configure_notifications(poll_seconds=0.1)
    a = await parked(rt, "escalating")
    await decide(rt, a, finance("bob"))
    await rt.wait(a.root_session_id, timeout=SETTLE_SECONDS)
    await asyncio.sleep(2.5)  # past the escalation's time
    assert told == []


@pytest.mark.parametrize("policy", ["deny", "approve", "error"])
async def test_an_unreached_quorum_expires_by_its_policy(make_runtime: Any, policy: str) -> None:
    bank = Bank()
    rt = await make_runtime([treasurer(bank)])
    a = await parked(rt, f"lapse_{policy}")
    await decide(rt, a, finance("bob"))
    end = await tool_end(rt, a.root_session_id)
    assert (end["outcome"], end["onTimeout"]) == ("expired", policy)
    assert bank.runs == ([ARGS] if policy == "approve" else [])
    rows = await record(rt, a)
    assert [(r["outcome"], r["credential"], r["onTimeout"], r["votes"]) for r in rows] == [
        ("approved", "hook", None, 1),
        ("expired", "deadline", policy, 1),
    ]


def test_a_policy_is_checked_when_the_tool_is_defined() -> None:
    def define(**options: Any) -> Any:
        return define_tool("t", "t", Transfer, execute=lambda a: None, **options)

    for bad in (
        {"approval_policy": ApprovalPolicy(quorum=2)},  # not an approval gate
        {"require_approval": True, "approval_policy": ApprovalPolicy(quorum=0)},
        {"require_approval": True, "approval_policy": ApprovalPolicy(roles="finance")},  # type: ignore[arg-type]
        {"require_approval": True, "approval_policy": ApprovalPolicy(escalate_to=("cfo",))},
        {
            "require_approval": True,
            "approval_policy": ApprovalPolicy(escalate_after=5, escalate_to=("cfo",)),
        },  # an escalation needs the roles that answer first
        {
            "require_approval": True,
            "client_tool_timeout": 60,
            "approval_policy": ApprovalPolicy(
                roles=("a",), escalate_after=60, escalate_to=("cfo",)
            ),
        },  # at the deadline, or after it
    ):
        with pytest.raises(ToolDefinitionError):
            define(**bad)
    tool = define(require_approval=True, approval_policy=ApprovalPolicy(quorum=3, four_eyes=True))
    assert tool.approval_policy == {"fourEyes": True, "quorum": 3}


async def test_a_quorum_waits_hibernated_and_its_last_approval_continues_it(
    make_runtime: Any,
) -> None:
    """A turn hibernated at once (no workflow waits): the first approval is counted on the row
    and starts nothing; the second completes the quorum and starts the continuation, which runs
    the tool once."""
    bank = Bank()
    rt = await make_runtime([treasurer(bank)], hibernate_after_seconds=0)
    a = await parked(rt, "two_of_three")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_SECONDS
    while "hibernated" not in (await rt.session(a.root_session_id)).metadata:
        assert loop.time() < deadline, "the turn did not hibernate"
        await asyncio.sleep(0.05)
    first = await decide(rt, a, finance("bob"))
    assert first.continuation is not None and first.continuation.kind == "awaiting_quorum"
    state = await rt.session(a.root_session_id)
    assert "hibernated" in state.metadata and state.status == "suspended_client_tool"
    assert bank.runs == []
    await decide(rt, a, finance("cy"))
    end = await tool_end(rt, a.root_session_id)
    assert end["decider"]["approvers"] == ["bob", "cy"] and bank.runs == [ARGS]
