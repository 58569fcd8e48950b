"""Companions across the parent's lifecycle, on Postgres and SQLite: replies in a parent's
log survive a retry and a rewind (never input, never dropped); an interrupt of the parent's
tree stops a companion's running turn (a send resumes it); an abort ends the companions;
``status`` lists them."""

from __future__ import annotations

from typing import Any

import psycopg

from helix_dbos.config import HelixSettings
from helix_dbos.core import define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.markers import entry_input_run, is_sub_agent_notification
from helix_dbos.errors import ProviderError
from helix_dbos.inspect.render import render_report
from helix_dbos.inspect.report import inspect_session
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime, Operator, names
from tests.runbook_sql import runbook_sql
from tests.runtime.conftest import MakeRuntime
from tests.support.companions import (
    companion_calls,
    lead_agent,
    lead_script,
    reviewer_agent,
    send_result,
    until,
)


class FailOnce:
    """``lead_script``, but the first ``boom`` fails the turn (a provider error)."""

    def __init__(self) -> None:
        self.failed = False
        self.seen: list[list[str]] = []

    def __call__(self, request: LLMRequest) -> LLMResponse:
        self.seen.append([m.content for m in request.messages])
        last = request.messages[-1]
        if last.content == "boom" and not self.failed:
            self.failed = True
            raise ProviderError("the provider is down", code="provider_error")
        return lead_script(request)


async def _done(runtime: AgentRuntime, text: str, sid: str | None = None) -> str:
    handle = await runtime.start("lead", text, session_id=sid)
    await handle.result()
    return handle.session_id


async def _settled(runtime: AgentRuntime, sid: str) -> Any:
    async def check() -> Any:
        state = await runtime.session(sid)
        return state if state.status not in ("running", "suspended_client_tool") else None

    return await until(check)


async def _notes(runtime: AgentRuntime, sid: str) -> list[str]:
    return [m.content for m in await runtime.messages(sid) if is_sub_agent_notification(m)]


async def test_a_retry_keeps_a_companion_reply_and_reruns_the_input(
    make_runtime: MakeRuntime,
) -> None:
    """A reply that reaches a failed parent lands after its failed input; the retry re-runs
    that input (found by its marker, not the reply's user row) and keeps the reply once."""
    script = FailOnce()
    lead = define_agent("lead", llm=ScriptedLLM(script), companions=[reviewer_agent()])
    runtime = await make_runtime([lead])
    sid = await _done(runtime, "send reviewer: ask a question")
    [call] = await companion_calls(runtime, sid)
    failed = await runtime.start("lead", "boom", session_id=sid)
    assert (await failed.result())["outcome"] == "failed"
    await runtime.submit_tool_result(sid, call["toolCallId"], result={"answer": "yes"})
    await until(lambda: _notes(runtime, sid))
    log = await runtime.messages(sid)
    assert [m.content for m in log[-2:]] == [
        "boom",
        '[companion reviewer] answered: {"answer": "yes"}',
    ]

    retried = await runtime.retry(sid)
    assert (await retried.result())["outcome"] == "completed"
    log = await runtime.messages(sid)
    assert await _notes(runtime, sid) == ['[companion reviewer] answered: {"answer": "yes"}']
    inputs = [m for m in log if entry_input_run(m) is not None]
    assert [m.content for m in inputs][-1] == "boom"
    assert entry_input_run(inputs[-1]) == retried.run_id
    # Re-run with the rows after it: the reply stays after the input, and the model reads it.
    note = '[companion reviewer] answered: {"answer": "yes"}'
    assert [m.content for m in log[-3:]] == ["boom", note, f"noted: {note}"]
    assert script.seen[-1][-2:] == ["boom", note]


async def test_a_rewind_re_appends_companion_replies_after_the_kept_prefix(
    make_runtime: MakeRuntime,
) -> None:
    """A rewind to a checkpoint before a reply keeps the reply after the checkpoint's
    conversation; the next message reads it."""
    runtime = await make_runtime([lead_agent()])
    sid = await _done(runtime, "hello")
    [early] = [c for c in await runtime.checkpoints(sid) if c["messageCount"] == 2]
    await _done(runtime, "send reviewer: look", sid)
    await _settled(runtime, names.companion_session_id(sid, "reviewer"))
    await until(lambda: _count_events(runtime, sid))
    await _done(runtime, "thanks", sid)  # appends the reply if it was kept while a turn ran
    assert await _notes(runtime, sid) == ["[companion reviewer] reviewed: look"]

    handle = await runtime.rewind(sid, early["checkpointId"])
    await handle.result()
    log = await runtime.messages(sid)
    assert [m.content for m in log] == [
        "hello",
        "ok: hello",
        "[companion reviewer] reviewed: look",
    ]
    await _done(runtime, "again", sid)
    assert [m.content for m in await runtime.messages(sid)][-2:] == ["again", "ok: again"]


async def _count_events(runtime: AgentRuntime, sid: str) -> bool:
    return any(e.type == "companion_message" for e in await runtime.events(sid))


async def test_the_parents_interrupt_stops_the_companion_and_abort_ends_it(
    make_runtime: MakeRuntime,
) -> None:
    """Interrupting the parent's tree stops its companion's running turn (parked here); the
    next send resumes it. Aborting the parent ends its companions: a send to one answers
    child_exited, and ``status`` shows it."""
    runtime = await make_runtime([lead_agent()])
    sid = await _done(runtime, "send reviewer: ask first")
    mate_id = names.companion_session_id(sid, "reviewer")
    await companion_calls(runtime, sid)
    view = await runtime.status(sid)
    assert view["companions"] == [
        {
            "companion": "reviewer",
            "sessionId": mate_id,
            "state": "waiting",
            "status": "suspended_client_tool",
            "runId": (await runtime.session(mate_id)).run_id,
        }
    ]
    await runtime.interrupt(sid)
    assert (await runtime.session(mate_id)).status == "interrupted"
    assert (await runtime.status(sid))["pendingToolCalls"] == []
    await _done(runtime, "send reviewer: carry on", sid)
    assert (await send_result(runtime, sid))["delivered"] is True
    assert (await _settled(runtime, mate_id)).status == "completed"

    await _done(runtime, "send reviewer: ask second", sid)
    await companion_calls(runtime, sid)
    await runtime.abort(sid, "closing")
    mate = await runtime.session(mate_id)
    assert mate.status == "failed" and "companionEnded" in mate.metadata
    [seen] = (await runtime.status(sid))["companions"]
    assert seen["state"] == "ended"
    await _done(runtime, "send reviewer: still there?", sid)
    assert await send_result(runtime, sid) == {"delivered": False, "reason": "child_exited"}


async def test_inspect_shows_a_sessions_companions(make_runtime: MakeRuntime, db_url: str) -> None:
    """``helix-dbos inspect``'s report lists the session's companions and their state."""
    runtime = await make_runtime([lead_agent()])
    sid = await _done(runtime, "send reviewer: ask something")
    mate_id = names.companion_session_id(sid, "reviewer")
    await companion_calls(runtime, sid)
    async with Operator.open(db_url) as op:
        report = await inspect_session(op, sid)
    [mate] = report.companions
    assert (mate["companion"], mate["sessionId"], mate["state"]) == ("reviewer", mate_id, "waiting")
    assert report.dump()["companions"] == report.companions
    text = render_report(report)
    assert f"reviewer  waiting  {mate_id}" in text.split("companions\n", 1)[1]


async def test_the_runbooks_companion_query_lists_them(pg_url: str) -> None:
    """The runbook's ``companions`` statement, run as written on real companions."""
    runtime = AgentRuntime(
        [lead_agent()],
        HelixSettings(database_url=pg_url, executor_id="runbook", application_version="t"),
    )
    await runtime.launch()
    try:
        sid = await _done(runtime, "send reviewer: ask a thing")
        mate_id = names.companion_session_id(sid, "reviewer")
        await companion_calls(runtime, sid)
        _, sql = runbook_sql()["companions"]
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute(sql).fetchall()
        mate = await runtime.session(mate_id)
        assert rows == [
            (sid, "reviewer", mate_id, "suspended_client_tool", mate.run_id, False,
             mate.metadata["persistent"]["workflowId"], 0),
        ]  # fmt: skip
    finally:
        await runtime.shutdown()
