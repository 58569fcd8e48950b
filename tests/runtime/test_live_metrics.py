"""The live Prometheus metrics follow real turns, on Postgres and SQLite.

The pending gauges are read from the database at each scrape; the waits histogram, expiries,
submits and turns are counted as they happen, once: a replayed commit (a recovered turn in a
new process) does not count its past waits again, and each runtime has its own registry.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import Agent, define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.session import SessionState
from helix_dbos.core.tools import define_tool
from helix_dbos.errors import ApprovalMismatchError, StaleStateError
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.observability.approval_metrics import ApprovalMetrics
from helix_dbos.runtime import AgentRuntime
from helix_dbos.runtime._commits.once import CommitContext, after_commit, commit_once
from helix_dbos.runtime.live_metrics import scrape
from tests.runtime.conftest import MakeRuntime

#: The quick approval's deadline: long enough for the test to see it pending first.
QUICK_SECONDS = 1.5


class Payment(BaseModel):
    amount: int = 1


class Question(BaseModel):
    question: str = "?"


class Answer(BaseModel):
    answer: str


def _pay(args: Payment) -> dict[str, int]:
    return {"paid": args.amount}


def _script(request: LLMRequest) -> LLMResponse:
    """``both``: a client call and an approval in one batch; ``ask then pay``: the client call,
    then the approval; ``pay`` / ``quick``: one approval; any result ends the turn."""
    last = request.messages[-1]
    if last.role == "user":
        if last.content == "both":
            return call(request, ("ask", {"question": "which?"}), ("pay", {"amount": 5}))
        if last.content == "ask then pay":
            return call(request, ("ask", {"question": "which?"}))
        if last.content == "quick":
            return call(request, ("quick_pay", {"amount": 2}))
        if last.content == "quick, deny if late":
            return call(request, ("quick_pay_or_deny", {"amount": 2}))
        return call(request, ("pay", {"amount": 1}))
    if last.role == "tool" and last.tool_name == "ask" and len(request.messages) < 4:
        return call(request, ("pay", {"amount": 3}))
    return reply("done")


def _agent() -> Agent:
    return define_agent(
        "cashier",
        llm=ScriptedLLM(_script),
        tools=[
            define_tool(
                "pay", "Pay", Payment, execute=_pay, require_approval=True, client_tool_timeout=300
            ),
            define_tool(
                "quick_pay",
                "Pay, if approved quickly",
                Payment,
                execute=_pay,
                require_approval=True,
                client_tool_timeout=QUICK_SECONDS,
            ),
            define_tool(
                "quick_pay_or_deny",
                "Pay, if approved quickly; a lapse denies it",
                Payment,
                execute=_pay,
                require_approval=True,
                client_tool_timeout=QUICK_SECONDS,
                on_timeout="deny",
            ),
            define_tool("ask", "Ask", Question, Answer, execute="client", client_tool_timeout=300),
        ],
    )


def _value(metrics: ApprovalMetrics, name: str, **labels: str) -> float:
    """A sample's value in the registry (0 when it has none)."""
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def _scraped(runtime: AgentRuntime) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics``'s text, parsed: (sample name, sorted labels) -> value."""
    text = (await scrape(runtime)).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def _approve(rt: AgentRuntime, sid: str, pending: dict[str, Any], ok: bool, **kw: Any) -> Any:
    return await rt.submit_tool_result(
        sid,
        pending["toolCallId"],
        kind="approval-response",
        approval_id=kw.pop("approval_id", pending.get("approvalId")),
        approved=ok,
        **kw,
    )


async def test_gauges_and_counters_follow_park_answer_deny_and_stop(
    make_runtime: MakeRuntime,
) -> None:
    rt = await make_runtime([_agent()])
    m = rt.metrics
    before = await _scraped(rt)
    # Every tool that can wait has its series from the start, at 0.
    assert before[("helix_pending_approvals", (("tool", "pay"),))] == 0
    assert before[("helix_pending_approvals", (("tool", "quick_pay"),))] == 0
    assert before[("helix_pending_client_calls", (("tool", "ask"),))] == 0
    assert before[("helix_oldest_pending_approval_age_seconds", ())] == 0

    # A client call and an approval park together.
    first = await rt.start("cashier", "both")
    sid = first.session_id
    pending = {p["toolName"]: p for p in await rt.wait_for_pending(sid, count=2)}
    await asyncio.sleep(0.05)  # the oldest approval has an age
    now = await _scraped(rt)
    assert now[("helix_pending_approvals", (("tool", "pay"),))] == 1
    assert now[("helix_pending_client_calls", (("tool", "ask"),))] == 1
    assert 0 < now[("helix_oldest_pending_approval_age_seconds", ())] < 60

    # The client answers: its call no longer waits; the submit is counted by its answer.
    answer = await rt.submit_tool_result(sid, pending["ask"]["toolCallId"], result={"answer": "a"})
    assert answer.continuation is not None and answer.continuation.kind == "awaiting_batch"
    await scrape(rt)
    assert _value(m, "helix_pending_client_calls", tool="ask") == 0
    assert _value(m, "helix_pending_approvals", tool="pay") == 1
    assert _value(m, "helix_submits_total", tool="ask", answer="awaiting_batch") == 1

    # A forged approval is refused: counted by its code.
    with pytest.raises(ApprovalMismatchError):
        await _approve(rt, sid, pending["pay"], True, approval_id="forged")
    assert _value(m, "helix_submits_total", tool="", answer="approval_mismatch") == 1

    # The human denies: the batch completes, the turn ends.
    denied = await _approve(rt, sid, pending["pay"], False, reason="too much")
    assert denied.continuation is not None and denied.continuation.kind == "new_run"
    assert (await rt.wait(sid, timeout=30))["status"] == "completed"
    await scrape(rt)
    assert _value(m, "helix_pending_approvals", tool="pay") == 0
    assert _value(m, "helix_oldest_pending_approval_age_seconds") == 0
    assert _value(m, "helix_submits_total", tool="pay", answer="new_run") == 1
    assert _value(m, "helix_tool_wait_seconds_count", tool="ask", outcome="answered") == 1
    assert _value(m, "helix_tool_wait_seconds_count", tool="pay", outcome="denied") == 1
    assert _value(m, "helix_tool_wait_seconds_count", tool="pay", outcome="answered") == 0
    assert _value(m, "helix_turns_total", outcome="completed") == 1

    # An approval given: answered, and the turn completes.
    second = await rt.start("cashier", "pay")
    (gate,) = await rt.wait_for_pending(second.session_id)
    await _approve(rt, second.session_id, gate, True)
    assert (await rt.wait(second.session_id, timeout=30))["status"] == "completed"
    assert _value(m, "helix_tool_wait_seconds_count", tool="pay", outcome="answered") == 1
    assert _value(m, "helix_turns_total", outcome="completed") == 2

    # An interrupt stops the waiting approval and ends the turn; a late answer is counted too.
    third = await rt.start("cashier", "pay")
    (gate,) = await rt.wait_for_pending(third.session_id)
    await scrape(rt)
    assert _value(m, "helix_pending_approvals", tool="pay") == 1
    await rt.interrupt(third.session_id)
    await scrape(rt)
    assert _value(m, "helix_pending_approvals", tool="pay") == 0
    assert _value(m, "helix_tool_wait_seconds_count", tool="pay", outcome="stopped") == 1
    assert _value(m, "helix_turns_total", outcome="interrupted") == 1
    late = await _approve(rt, third.session_id, gate, True)
    assert late.reason == "run_stopped"
    assert _value(m, "helix_submits_total", tool="", answer="run_stopped") == 1
    # Nothing expired, and no series names a session.
    assert _value(m, "helix_tool_expiries_total", tool="pay") == 0
    text = (await scrape(rt)).decode()
    assert sid not in text and third.session_id not in text


async def test_an_approval_whose_deadline_lapses_counts_as_expired(
    make_runtime: MakeRuntime,
) -> None:
    """Expired, whatever the tool's policy makes of the lapse: an error by default, or a
    denial (``on_timeout="deny"``), which is still not counted as a human's denial."""
    rt = await make_runtime([_agent()])
    m = rt.metrics
    handle = await rt.start("cashier", "quick")
    denying = await rt.start("cashier", "quick, deny if late")
    await rt.wait_for_pending(handle.session_id)
    await rt.wait_for_pending(denying.session_id)
    await scrape(rt)
    assert _value(m, "helix_pending_approvals", tool="quick_pay") == 1
    assert _value(m, "helix_pending_approvals", tool="quick_pay_or_deny") == 1
    await rt.wait(handle.session_id, timeout=30)
    await rt.wait(denying.session_id, timeout=30)
    await scrape(rt)
    assert _value(m, "helix_pending_approvals", tool="quick_pay") == 0
    assert _value(m, "helix_pending_approvals", tool="quick_pay_or_deny") == 0
    lapsed_deny = {"tool": "quick_pay_or_deny"}
    assert _value(m, "helix_tool_expiries_total", **lapsed_deny) == 1
    assert _value(m, "helix_tool_wait_seconds_count", **lapsed_deny, outcome="expired") == 1
    assert _value(m, "helix_tool_wait_seconds_count", **lapsed_deny, outcome="denied") == 0
    assert _value(m, "helix_tool_expiries_total", tool="quick_pay") == 1
    assert _value(m, "helix_tool_wait_seconds_count", tool="quick_pay", outcome="expired") == 1
    # The wait lasted the deadline: it falls in the 5 s bucket, not the 1 s one.
    assert _value(m, "helix_tool_wait_seconds_sum", tool="quick_pay", outcome="expired") == (
        pytest.approx(QUICK_SECONDS, abs=0.01)
    )
    assert (
        _value(m, "helix_tool_wait_seconds_bucket", tool="quick_pay", outcome="expired", le="1.0")
        == 0
    )
    assert _value(m, "helix_tool_wait_seconds_count", tool="quick_pay", outcome="denied") == 0


def _runtime(db_url: str) -> AgentRuntime:
    settings = HelixSettings(database_url=db_url, executor_id="exec", application_version="t")
    return AgentRuntime([_agent()], settings)


def test_a_recovered_turn_does_not_count_its_past_waits_again(db_url: str) -> None:
    """A turn answered its client call, then parked on an approval; the process stops. The
    next process replays the turn (its first batch's commit returns its recorded result):
    that wait is not counted again there; the approval it then answers is."""
    session_id, first_counts = asyncio.run(_answer_then_stop(db_url))
    assert first_counts == (1, 0)
    asyncio.run(_recover_and_approve(db_url, session_id))


async def _answer_then_stop(db_url: str) -> tuple[str, tuple[float, float]]:
    rt = _runtime(db_url)
    await rt.launch()
    try:
        handle = await rt.start("cashier", "ask then pay")
        (ask,) = await rt.wait_for_pending(handle.session_id)
        await rt.submit_tool_result(handle.session_id, ask["toolCallId"], result={"answer": "a"})
        (gate,) = await rt.wait_for_pending(handle.session_id)  # the approval, parked next
        assert gate["toolName"] == "pay"
        counts = (
            _value(rt.metrics, "helix_tool_wait_seconds_count", tool="ask", outcome="answered"),
            _value(rt.metrics, "helix_turns_total", outcome="completed"),
        )
        return handle.session_id, counts
    finally:
        await rt.shutdown()


async def _recover_and_approve(db_url: str, session_id: str) -> None:
    rt = _runtime(db_url)
    await rt.launch()
    try:
        (gate,) = await rt.wait_for_pending(session_id)
        await _approve(rt, session_id, gate, True)
        assert (await rt.wait(session_id, timeout=60))["status"] == "completed"
        m = rt.metrics
        assert _value(m, "helix_tool_wait_seconds_count", tool="ask", outcome="answered") == 0
        assert _value(m, "helix_tool_wait_seconds_count", tool="pay", outcome="answered") == 1
        assert _value(m, "helix_turns_total", outcome="completed") == 1
    finally:
        await rt.shutdown()


async def test_commit_effects_run_once_only_for_the_commit_that_landed(
    make_runtime: MakeRuntime,
) -> None:
    """``after_commit``: the effect of the execution that committed runs once; a replay of the
    slot, the losers of a race for it, and an attempt rolled back and retried run none."""
    runtime = await make_runtime([_agent()])
    await runtime.store.create_session(
        SessionState(session_id="s", agent_type="cashier", root_session_id="s")
    )
    effects: list[int] = []
    executions = 0

    async def body() -> int:
        nonlocal executions
        executions += 1
        n = executions
        after_commit(lambda: effects.append(n))
        if n == 1:
            raise StaleStateError("a lost race: the transaction runs again")
        return n

    assert await commit_once(CommitContext("wf:1:test"), "s", "r", body) == 2
    assert effects == [2]
    assert await commit_once(CommitContext("wf:1:test"), "s", "r", body) == 2  # a replay: recorded
    racing = await asyncio.gather(
        *[commit_once(CommitContext("wf:2:test"), "s", "r", body) for _ in range(4)]
    )
    assert len(set(racing)) == 1
    assert effects == [2, racing[0]]


def test_each_runtime_has_a_registry_of_its_own() -> None:
    """Two runtimes (and their metrics) in one process never share series."""
    first, second = AgentRuntime([_agent()]), AgentRuntime([_agent()])
    assert first.metrics.registry is not second.metrics.registry
    first.metrics.count_turn("completed")
    assert _value(first.metrics, "helix_turns_total", outcome="completed") == 1
    assert _value(second.metrics, "helix_turns_total", outcome="completed") == 0
