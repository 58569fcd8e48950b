"""What the standard mode guarantees holds for companions, on Postgres and SQLite: a
companion hibernates after its idle TTL and a send wakes it; its turn parked on a call
hibernates past its hot window and a submit on the root continues it, reply included; an
approval inside a companion is decided on the root; a lapsed deadline ends its call."""

from __future__ import annotations

from typing import Any

from dbos import DBOS

from helix_dbos.core.markers import is_sub_agent_notification
from helix_dbos.runtime import AgentRuntime, names, records
from tests.runtime.conftest import MakeRuntime
from tests.support.companions import (
    companion_calls,
    lead_agent,
    reviewer_agent,
    send_result,
    until,
)


async def _say(runtime: AgentRuntime, text: str, sid: str | None = None) -> tuple[str, Any]:
    handle = await runtime.start("lead", text, session_id=sid)
    await handle.result()
    return handle.session_id, await send_result(runtime, handle.session_id)


async def _reply(runtime: AgentRuntime, sid: str, text: str) -> None:
    """Wait for the companion's reply ``text``, then let the parent's next entry append it
    if it was kept while the parent's turn ran."""

    async def came() -> bool:
        events = await runtime.events(sid)
        return any(e.type == "companion_message" and e.data["text"] == text for e in events)

    await until(came)
    await (await runtime.start("lead", "next", session_id=sid)).result()
    notes = [m.content for m in await runtime.messages(sid) if is_sub_agent_notification(m)]
    assert notes[-1] == f"[companion reviewer] {text}"


async def test_an_idle_companion_hibernates_and_a_send_wakes_it(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime([lead_agent(reviewer_agent(idle_ttl=1.0))])
    sid, first = await _say(runtime, "send reviewer: one")
    mate_id = names.companion_session_id(sid, "reviewer")
    first_workflow = names.persistent_workflow_id(mate_id, first["runId"])

    async def hibernated() -> bool:
        [found] = await DBOS.list_workflows_async(workflow_ids=[first_workflow])
        return bool(found.status == "SUCCESS")

    await until(hibernated)
    assert records.PERSISTENT_KEY not in (await runtime.session(mate_id)).metadata
    [view] = (await runtime.status(sid))["companions"]
    assert view["state"] == "hibernated"
    _, woken = await _say(runtime, "send reviewer: two", sid)
    assert woken["delivered"] is True
    assert (await runtime.session(mate_id)).workflow_id == names.persistent_workflow_id(
        mate_id, woken["runId"]
    )
    await _reply(runtime, sid, "reviewed: two")


async def test_a_companion_parked_past_its_hot_window_continues_from_a_root_submit(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime([lead_agent(reviewer_agent(hibernate_after=0))])
    sid, _ = await _say(runtime, "send reviewer: ask where")
    mate_id = names.companion_session_id(sid, "reviewer")
    [call] = await companion_calls(runtime, sid)

    async def marked() -> bool:
        return records.HIBERNATED_KEY in (await runtime.session(mate_id)).metadata

    await until(marked)
    answer = await runtime.submit_tool_result(sid, call["toolCallId"], result={"answer": "here"})
    assert answer.status == "accepted"
    await _reply(runtime, sid, 'answered: {"answer": "here"}')
    _, again = await _say(runtime, "send reviewer: more", sid)
    assert again["delivered"] is True  # the continuation serves the companion's inbox
    await _reply(runtime, sid, "reviewed: more")


async def test_an_approval_inside_a_companion_is_decided_on_the_root(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime([lead_agent()])
    sid, _ = await _say(runtime, "send reviewer: publish the draft")
    [call] = await companion_calls(runtime, sid)
    assert call["kind"] == "approval"
    assert call["ownerSessionId"] == names.companion_session_id(sid, "reviewer")
    answer = await runtime.submit_tool_result(
        sid,
        call["toolCallId"],
        kind="approval-response",
        approval_id=call["approvalId"],
        approved=True,
    )
    assert answer.status == "accepted"
    await _reply(runtime, sid, 'answered: {"published": "the draft"}')


async def test_a_companions_call_deadline_lapses_and_it_replies(make_runtime: MakeRuntime) -> None:
    runtime = await make_runtime([lead_agent(reviewer_agent(client_tool_timeout=1.0))])
    sid, _ = await _say(runtime, "send reviewer: ask anyone")
    await companion_calls(runtime, sid)
    await _reply(runtime, sid, "answered: client_tool_timeout")
