"""``as_companion(agent, wake_parent=True)``, on Postgres and SQLite: a reply that reaches
an idle parent starts a parent turn (no user message) that reads it; one kept while the
parent's turn ran starts it when that turn ends. Without the option, nothing starts."""

from __future__ import annotations

from typing import Any

from helix_dbos.core import define_agent
from helix_dbos.core.companions import as_companion
from helix_dbos.core.markers import entry_input_run
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime, names
from tests.runtime.conftest import MakeRuntime
from tests.support.companions import lead_script, reviewer_agent, until


def _lead(wake: bool, delay: float = 0.0) -> Any:
    return define_agent(
        "lead",
        llm=ScriptedLLM(lead_script, delay_seconds=delay),
        companions=[as_companion(reviewer_agent(), wake_parent=wake)],
    )


async def _last(runtime: AgentRuntime, sid: str, text: str) -> bool:
    log = await runtime.messages(sid)
    return bool(log) and log[-1].content == text


async def test_a_reply_to_an_idle_parent_wakes_it(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime([_lead(wake=True)])
    handle = await runtime.start("lead", "send reviewer: ask first")
    await handle.result()
    sid = handle.session_id
    # The companion parks on its call: the parent is idle when the reply comes.
    view = await until(lambda: _pending(runtime, sid))
    await runtime.submit_tool_result(sid, view["toolCallId"], result={"answer": "a"})
    note = '[companion reviewer] answered: {"answer": "a"}'
    await until(lambda: _last(runtime, sid, f"noted: {note}"))
    state = await runtime.session(sid)
    assert state.status == "completed" and state.run_id != handle.run_id
    log = await runtime.messages(sid)
    assert [m.content for m in log[-2:]] == [note, f"noted: {note}"]
    assert entry_input_run(log[-2]) is None  # the woken turn has no input of its own


async def test_a_reply_kept_while_the_parent_ran_wakes_it_when_its_turn_ends(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime([_lead(wake=True, delay=1.0)])
    handle = await runtime.start("lead", "send reviewer: quick look")
    await handle.result()
    sid = handle.session_id
    note = "[companion reviewer] reviewed: quick look"
    await until(lambda: _last(runtime, sid, f"noted: {note}"))
    replies = [e for e in await runtime.events(sid) if e.type == "companion_message"]
    assert [e.data["notification"] for e in replies] == ["queued"]


async def test_without_the_option_a_reply_waits_for_the_next_message(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime([_lead(wake=False)])
    handle = await runtime.start("lead", "send reviewer: quick look")
    await handle.result()
    sid = handle.session_id
    mate_id = names.companion_session_id(sid, "reviewer")

    async def replied() -> bool:
        return any(e.type == "companion_message" for e in await runtime.events(sid))

    await until(replied)
    await until(lambda: _idle(runtime, mate_id))
    assert (await runtime.session(sid)).run_id == handle.run_id


async def _pending(runtime: AgentRuntime, sid: str) -> Any:
    calls = (await runtime.status(sid))["pendingToolCalls"]
    return calls[0] if calls else None


async def _idle(runtime: AgentRuntime, sid: str) -> bool:
    return (await runtime.session(sid)).status == "completed"


async def test_a_reply_wakes_a_persistent_parent_through_its_inbox(
    make_runtime: MakeRuntime,
) -> None:
    """A persistent parent is woken like any other: the wake is a message to its own live
    workflow (or starts one), and the woken turn reads the reply."""
    lead = define_agent(
        "lead",
        llm=ScriptedLLM(lead_script, delay_seconds=0.5),
        companions=[as_companion(reviewer_agent(), wake_parent=True)],
        persistent=True,
    )
    runtime = await make_runtime([lead])
    handle = await runtime.start("lead", "send reviewer: quick look")
    await handle.result()
    sid = handle.session_id
    note = "[companion reviewer] reviewed: quick look"
    await until(lambda: _last(runtime, sid, f"noted: {note}"))
    assert (await runtime.session(sid)).workflow_id == handle.workflow_id  # its inbox took it
