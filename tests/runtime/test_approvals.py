"""Approval gates: a ``require_approval`` server tool parks the turn until a human decides.

The turn emits ``tool_approval_request`` with ``approvalId = <runId>::<toolCallId>`` and the
arguments' digest. An approval runs the tool (with the human's edited arguments, validated,
when given); a denial gives the model a failed result carrying the reason, and the tool never
runs; a forged approval is refused typed and stores nothing; a timeout is not a denial.
"""

from __future__ import annotations

from typing import Any

import pytest

from helix_dbos.errors import ApprovalMismatchError, RequestValidationError
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime
from tests.support.bank import ARGS, Bank, banker, script


async def setup(
    make_runtime: Any,
    message: str = "pay",
    count: int = 1,
) -> tuple[AgentRuntime, Bank, ScriptedLLM, str, list[dict[str, Any]]]:
    bank, llm = Bank(), ScriptedLLM(script)
    rt = await make_runtime([banker(bank, llm)])
    handle = await rt.start("banker", message)
    pending = await rt.wait_for_pending(handle.session_id, count=count)
    return rt, bank, llm, handle.session_id, pending


async def approve(rt: AgentRuntime, sid: str, call_: dict[str, Any], **fields: Any) -> Any:
    values = {"approval_id": call_["approvalId"], "approved": True}
    values.update(fields)
    return await rt.submit_tool_result(sid, call_["toolCallId"], kind="approval-response", **values)


async def test_approval_request_then_forged_approvals_refused_then_approve_runs_the_tool(
    make_runtime: Any,
) -> None:
    rt, bank, llm, sid, [pending] = await setup(make_runtime)
    state = await rt.session(sid)
    tcid = pending["toolCallId"]
    assert state.status == "suspended_client_tool"
    assert pending["kind"] == "approval"
    assert pending["approvalId"] == f"{state.run_id}::{tcid}"

    events = await rt.events(sid)
    requests = [e for e in events if e.type == "tool_approval_request"]
    assert len(requests) == 1
    data = requests[0].data
    assert data["approvalId"] == pending["approvalId"] and data["toolCallId"] == tcid
    assert data["toolName"] == "transfer" and data["input"] == ARGS
    assert data["argsDigest"] and data["deadlineAt"] == pending["deadlineAt"]
    assert not any(e.type == "tool_start" for e in events)
    assert bank.runs == [], "the gated tool never runs before its approval"

    # Forged approvals: another call's or run's id, or other arguments than the call's.
    forgeries: list[dict[str, Any]] = [
        {"approval_id": f"run_other::{tcid}"},
        {"approval_id": f"{state.run_id}::call_someone_else"},
        {"approval_id": tcid},
        {"shown_input": {"amount": 4000, "to": "mallory"}},
        {"shown_input": {"amount": 40}},
    ]
    for forged in forgeries:
        with pytest.raises(ApprovalMismatchError) as refused:
            await approve(rt, sid, pending, **forged)
        assert refused.value.code == "approval_mismatch" and refused.value.http_status == 400
    with pytest.raises(RequestValidationError):  # a client-tool result cannot answer an approval
        await rt.submit_tool_result(sid, tcid, result={"ok": True})
    after = await rt.session(sid)
    assert after.version == state.version and after.pending == state.pending
    assert len(await rt.events(sid)) == len(events)
    assert bank.runs == []

    # The real approval still works afterwards; it is bound to the arguments shown (in any
    # key order).
    answer = await approve(rt, sid, pending, shown_input={"to": "alice", "amount": 40})
    assert answer.status == "accepted"
    assert (await rt.wait(sid))["status"] == "completed"
    assert bank.runs == [ARGS], "approved: the tool ran exactly once, with the call's arguments"

    history = await rt.messages(sid)
    tool = next(m for m in history if m.role == "tool")
    assert not tool.is_error and tool.result == {"transferred": 40, "to": "alice"}
    # The model's next call saw that result.
    assert llm.requests[-1].messages[-1].result == {"transferred": 40, "to": "alice"}
    assert history[-1].content.startswith("ok: ")
    assert (await approve(rt, sid, pending)).status == "already_completed"
    assert len(bank.runs) == 1


async def test_deny_with_reason_and_timeout_never_run_the_tool(make_runtime: Any) -> None:
    """A denial gives the model a failed result carrying the reason; a lapsed deadline is NOT
    a denial: the model reads ``client_tool_timeout``."""
    rt, bank, llm, sid, [pending] = await setup(make_runtime)
    answer = await approve(rt, sid, pending, approved=False, reason="over the daily limit")
    assert answer.status == "accepted"
    assert (await rt.wait(sid))["status"] == "completed"
    assert bank.runs == []
    tool = next(m for m in await rt.messages(sid) if m.role == "tool")
    assert tool.is_error and tool.error_code == "approval_denied"
    assert "over the daily limit" in tool.content
    seen = llm.requests[-1].messages[-1]
    assert seen.role == "tool" and seen.error_code == "approval_denied"
    assert "over the daily limit" in seen.content
    end = [e for e in await rt.events(sid) if e.type == "tool_end"][-1]
    assert end.data["errorCode"] == "approval_denied"

    # Nobody answers the quick gate (2 s).
    handle = await rt.start("banker", "pay quickly")
    assert (await rt.wait(handle.session_id, timeout=15))["status"] == "completed"
    [request] = [e for e in await rt.events(handle.session_id) if e.type == "tool_approval_request"]
    quick = request.data
    assert quick["toolName"] == "quick_transfer"
    assert bank.runs == []
    tool = next(m for m in await rt.messages(handle.session_id) if m.role == "tool")
    assert tool.is_error and tool.error_code == "client_tool_timeout"
    assert llm.requests[-1].messages[-1].error_code == "client_tool_timeout"
    state = await rt.session(handle.session_id)
    assert state.completed[quick["toolCallId"]].outcome == "timeout"
    late = await approve(rt, handle.session_id, quick)
    assert late.status == "unknown_tool_call"
    assert bank.runs == []


async def test_edited_input_runs_validated_and_invalid_edits_are_refused(make_runtime: Any) -> None:
    rt, bank, _, sid, [pending] = await setup(make_runtime)
    before = await rt.session(sid)

    with pytest.raises(RequestValidationError) as invalid:
        await approve(rt, sid, pending, edited_input={"amount": -5, "to": "bob"})
    assert invalid.value.code == "validation_error" and invalid.value.http_status == 400
    assert invalid.value.details["cause"] == "edited_input"
    with pytest.raises(RequestValidationError):
        await approve(rt, sid, pending, edited_input={"amount": "lots", "to": "bob"})
    with pytest.raises(RequestValidationError):  # edits come with an approval, not a denial
        await approve(rt, sid, pending, approved=False, edited_input={"amount": 5, "to": "bob"})
    after = await rt.session(sid)
    assert after.version == before.version
    assert after.pending[pending["toolCallId"]].submitted_at is None

    # The digest binds what the human was SHOWN (the call's arguments), not the edit.
    answer = await approve(
        rt, sid, pending, shown_input=ARGS, edited_input={"amount": 5, "to": "bob"}
    )
    assert answer.status == "accepted"
    assert (await rt.wait(sid))["status"] == "completed"
    assert bank.runs == [{"amount": 5, "to": "bob"}], "the tool ran with the edited arguments"
    tool = next(m for m in await rt.messages(sid) if m.role == "tool")
    assert tool.result == {"transferred": 5, "to": "bob"}

    # ``{}`` is a valid edit (every field has a default): the tool runs with it, not with the
    # call's original arguments.
    handle = await rt.start("banker", "pay")
    [second] = await rt.wait_for_pending(handle.session_id)
    await approve(rt, handle.session_id, second, edited_input={})
    assert (await rt.wait(handle.session_id))["status"] == "completed"
    assert bank.runs[1:] == [{"amount": 1, "to": "treasury"}]


async def test_approval_and_client_call_share_one_batch(make_runtime: Any) -> None:
    rt, bank, llm, sid, pending = await setup(make_runtime, "pay and confirm", count=2)
    kinds = {p["kind"]: p for p in pending}
    assert set(kinds) == {"client", "approval"}
    client, gate = kinds["client"], kinds["approval"]
    assert "approvalId" not in client
    events = await rt.events(sid)
    assert [e.type for e in events if e.type in ("tool_start", "tool_approval_request")] == [
        "tool_start",
        "tool_approval_request",
    ]

    first = await approve(rt, sid, gate)
    assert first.continuation is not None and first.continuation.kind == "awaiting_batch"
    assert bank.runs == [], "the batch is partial: nothing runs yet"
    last = await rt.submit_tool_result(sid, client["toolCallId"], result={"ok": True})
    assert last.continuation is not None and last.continuation.kind == "new_run"
    assert (await rt.wait(sid))["status"] == "completed"
    assert bank.runs == [ARGS]
    assert llm.calls == 2, "one model call per batch"

    history = await rt.messages(sid)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [m.tool_call_id for m in history[2:4]] == [c.id for c in history[1].tool_calls]
    assert history[2].result == {"ok": True}
    assert history[3].result == {"transferred": 40, "to": "alice"}
