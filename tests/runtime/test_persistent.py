"""Persistent agents: one workflow per session, turns from its inbox, idle-TTL hibernation.

On Postgres and SQLite: turns of a live workflow are delivered to it; after the idle TTL it
hibernates and the next message starts a new one; a client call parks in the same workflow;
an interrupt ends the workflow; a message racing hibernation is never lost or taken twice;
the reconciler starts a lost start and leaves a healthy idle workflow alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from typing import Any

import httpx
import pytest
from dbos import DBOS
from fastapi import FastAPI

from helix_dbos.config import HelixSettings
from helix_dbos.core import define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.errors import AgentAlreadyRunningError, ToolDefinitionError
from helix_dbos.http import create_router
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime, names, records
from helix_dbos.runtime._commits.opening import open_turn
from helix_dbos.runtime._companions import persistent
from helix_dbos.runtime._operations.heal import Repair
from tests.runtime.conftest import MakeRuntime
from tests.runtime.persistent_agents import keeper_agent


async def _workflow(workflow_id: str | None) -> Any:
    assert workflow_id is not None
    [found] = await DBOS.list_workflows_async(workflow_ids=[workflow_id])
    return found


async def _ended(workflow_id: str | None, timeout: float = 30.0) -> Any:
    """Wait for a workflow to leave PENDING; its status row."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = await _workflow(workflow_id)
        if found.status not in ("PENDING", "ENQUEUED"):
            return found
        assert loop.time() < deadline, f"{workflow_id} still {found.status}"
        await asyncio.sleep(0.05)


async def _texts(runtime: AgentRuntime, session_id: str) -> list[str]:
    return [m.content for m in await runtime.messages(session_id)]


def test_idle_ttl_is_validated() -> None:
    """idle_ttl needs persistent=True, and a finite number > 0."""
    llm = ScriptedLLM(lambda r: reply("x"))
    assert define_agent("p", llm=llm, persistent=True).idle_ttl == 300.0
    with pytest.raises(ToolDefinitionError):
        define_agent("p", llm=llm, idle_ttl=5)
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ToolDefinitionError):
            define_agent("p", llm=llm, persistent=True, idle_ttl=bad)


async def test_turns_are_delivered_to_the_live_workflow_then_it_hibernates(
    make_runtime: MakeRuntime,
) -> None:
    """Two turns run in one workflow (started, then delivered); after the idle TTL the
    workflow ends (hibernated) and the next message starts a new one."""
    runtime = await make_runtime([keeper_agent(idle_ttl=1.5)])
    first = await runtime.start("keeper", "hello")
    assert first.delivery == "started" and first.dump()["delivery"] == "started"
    assert first.workflow_id == names.persistent_workflow_id(first.session_id, first.run_id)
    sid = first.session_id
    assert (await runtime.wait(sid))["status"] == "completed"
    second = await runtime.start("keeper", "again", session_id=sid)
    assert second.delivery == "delivered" and second.workflow_id == first.workflow_id
    assert second.run_id != first.run_id
    # Each handle waits for its own turn, not for the long-lived workflow.
    done = await second.result()
    assert (done["outcome"], done["text"], done["runId"]) == (
        "completed",
        "echo: again",
        second.run_id,
    )
    assert (await first.result())["text"] == "echo: hello"
    view = await runtime.wait(sid)
    assert view["status"] == "completed" and view["runId"] == second.run_id
    assert (await runtime.session(sid)).workflow_id == first.workflow_id

    ended = await _ended(first.workflow_id)
    assert ended.status == "SUCCESS"
    assert ended.output == {"turns": 2, "ended": "hibernated", "lastRunId": second.run_id}
    assert records.PERSISTENT_KEY not in (await runtime.session(sid)).metadata

    third = await runtime.start("keeper", "awake", session_id=sid)
    assert third.delivery == "started" and third.workflow_id != first.workflow_id
    assert (await runtime.wait(sid))["status"] == "completed"
    assert await _texts(runtime, sid) == [
        "hello",
        "echo: hello",
        "again",
        "echo: again",
        "awake",
        "echo: awake",
    ]


async def test_client_calls_park_in_the_persistent_workflow(make_runtime: MakeRuntime) -> None:
    """A client call parks on its own topic in the same workflow; its answer continues the
    turn (not the inbox), and a message over it is refused like a standard session's."""
    runtime = await make_runtime([keeper_agent()])
    first = await runtime.start("keeper", "hi")
    sid = first.session_id
    await runtime.wait(sid)
    parked = await runtime.start("keeper", "2 edits", session_id=sid)
    assert parked.delivery == "delivered"
    calls = await runtime.wait_for_pending(sid, 2)
    with pytest.raises(AgentAlreadyRunningError):
        await runtime.start("keeper", "too early", session_id=sid)
    for i, c in enumerate(calls):
        answer = await runtime.submit_tool_result(sid, c["toolCallId"], result={"applied": i})
        assert answer.status == "accepted"
    assert (await runtime.wait(sid))["status"] == "completed"
    assert (await _texts(runtime, sid))[-1] == 'results: {"applied": 0} | {"applied": 1}'
    # Still the one workflow, back on its inbox: the next message is delivered to it.
    nxt = await runtime.start("keeper", "after", session_id=sid)
    assert nxt.delivery == "delivered" and nxt.workflow_id == first.workflow_id
    await runtime.wait(sid)
    assert (await _workflow(first.workflow_id)).status == "PENDING"


async def test_a_new_message_over_a_parked_call_is_drained_in_the_same_workflow(
    make_runtime: MakeRuntime,
) -> None:
    """resume(with_message, abandon_pending) over a persistent session's parked call: the
    call is abandoned, the message committed after it, and the workflow goes on."""
    runtime = await make_runtime([keeper_agent()])
    first = await runtime.start("keeper", "1 edit")
    sid = first.session_id
    await runtime.wait_for_pending(sid)
    await runtime.resume(sid, "with_message", message="never mind", abandon_pending=True)
    assert (await runtime.wait(sid))["status"] == "completed"
    texts = await _texts(runtime, sid)
    assert texts[-2:] == ["never mind", "echo: never mind"]
    nxt = await runtime.start("keeper", "more", session_id=sid)
    assert nxt.delivery == "delivered"
    await runtime.wait(sid)


@pytest.mark.parametrize("stop", ["interrupt", "abort"])
async def test_an_interrupt_ends_the_persistent_workflow(
    make_runtime: MakeRuntime, stop: str
) -> None:
    """Interrupting (or aborting) a persistent session's parked turn ends the session
    interrupted (failed) and its workflow cancelled; a late submit answers run_stopped; the
    next message starts a new workflow."""
    runtime = await make_runtime([keeper_agent()])
    first = await runtime.start("keeper", "1 edit")
    sid = first.session_id
    [c] = await runtime.wait_for_pending(sid)
    state = await (runtime.interrupt(sid) if stop == "interrupt" else runtime.abort(sid))
    assert state.status == ("interrupted" if stop == "interrupt" else "failed")
    assert records.PERSISTENT_KEY not in state.metadata
    assert (await _ended(first.workflow_id)).status == "CANCELLED"
    assert (await first.result())["outcome"] == "stopped"
    late = await runtime.submit_tool_result(sid, c["toolCallId"], result={"applied": 1})
    assert late.status == "unknown_tool_call" and late.reason == "run_stopped"
    nxt = await runtime.start("keeper", "back", session_id=sid)
    assert nxt.delivery == "started" and nxt.workflow_id != first.workflow_id
    assert (await runtime.wait(sid))["status"] == "completed"
    assert (await _texts(runtime, sid))[-2:] == ["back", "echo: back"]
    # The reconciler finds nothing to repair: the cancelled workflow's session has ended.
    assert await runtime.heal(grace_seconds=0) == []


async def test_an_interrupt_while_idle_leaves_the_workflow_waiting(
    make_runtime: MakeRuntime,
) -> None:
    """Between turns there is nothing to stop: the workflow keeps waiting on its inbox."""
    runtime = await make_runtime([keeper_agent()])
    first = await runtime.start("keeper", "hi")
    await runtime.wait(first.session_id)
    assert (await runtime.interrupt(first.session_id)).status == "completed"
    nxt = await runtime.start("keeper", "still there?", session_id=first.session_id)
    assert nxt.delivery == "delivered"
    await runtime.wait(first.session_id)


async def test_the_reconciler_leaves_a_live_idle_workflow_alone(
    make_runtime: MakeRuntime,
) -> None:
    """A session between turns with a PENDING persistent workflow is healthy: no repair."""
    runtime = await make_runtime([keeper_agent()])
    first = await runtime.start("keeper", "hi")
    await runtime.wait(first.session_id)
    assert await runtime.heal(grace_seconds=0) == []
    assert (await _workflow(first.workflow_id)).status == "PENDING"
    nxt = await runtime.start("keeper", "again", session_id=first.session_id)
    assert nxt.delivery == "delivered"
    await runtime.wait(first.session_id)


async def test_the_reconciler_starts_a_lost_persistent_start(make_runtime: MakeRuntime) -> None:
    """A claim committed without its workflow (a crash between the two) is started by the
    reconciler under the recorded id; later messages are delivered to it."""
    runtime = await make_runtime([keeper_agent()])
    sid, run_id = records.new_session_id(), records.new_run_id()
    workflow_id = names.persistent_workflow_id(sid, run_id)
    await runtime.store.transact(
        lambda: open_turn(
            runtime.store,
            session_id=sid,
            agent_type="keeper",
            turn_id=run_id,
            message="lost",
            workflow_id=workflow_id,
            metadata={records.PERSISTENT_KEY: {"workflowId": workflow_id, "since": 0}},
        )
    )
    assert await runtime.heal(grace_seconds=0) == [Repair(sid, workflow_id, None, "started")]
    assert (await runtime.wait(sid))["status"] == "completed"
    nxt = await runtime.start("keeper", "found", session_id=sid)
    assert nxt.delivery == "delivered" and nxt.workflow_id == workflow_id
    await runtime.wait(sid)
    assert await _texts(runtime, sid) == ["lost", "echo: lost", "found", "echo: found"]


async def test_a_stale_mark_starts_a_new_workflow(make_runtime: MakeRuntime) -> None:
    """A live workflow that ended without hibernating (cancelled by hand) is not sent to:
    the next message starts a new workflow."""
    runtime = await make_runtime([keeper_agent()])
    first = await runtime.start("keeper", "hi")
    await runtime.wait(first.session_id)
    assert first.workflow_id is not None
    await DBOS.cancel_workflow_async(first.workflow_id)
    nxt = await runtime.start("keeper", "again", session_id=first.session_id)
    assert nxt.delivery == "started" and nxt.workflow_id != first.workflow_id
    assert (await runtime.wait(first.session_id))["status"] == "completed"


@pytest.mark.slow
async def test_messages_racing_hibernation_are_never_lost_or_doubled(
    make_runtime: MakeRuntime,
) -> None:
    """Round after round, several messages race each other and the idle TTL's lapse. A
    message is taken (delivered or started) or refused (typed, ``state_already_running``:
    a turn was running); every taken message is in the conversation exactly once, answered
    exactly once, and no refused one is."""
    ttl = 0.5
    runtime = await make_runtime([keeper_agent(idle_ttl=ttl)])
    first = await runtime.start("keeper", "m0")
    sid = first.session_id
    taken = ["m0"]
    deliveries: list[str] = ["started"]
    rng = random.Random(14)
    for rnd in range(1, 16):
        await runtime.wait(sid, timeout=120)
        # Well inside the TTL (delivered), around its lapse (the race), well past it (started).
        lo, hi = [(0.0, 0.2), (0.8, 1.3), (3.0, 3.5)][rnd % 3]
        await asyncio.sleep(rng.uniform(lo * ttl, hi * ttl))

        async def send(i: int, rnd: int = rnd) -> tuple[str, str | None]:
            text = f"m{rnd}.{i}"
            try:
                handle = await runtime.start("keeper", text, session_id=sid)
            except AgentAlreadyRunningError:
                return text, None
            except Exception as exc:  # reported below with the round, never swallowed
                return text, f"error: {type(exc).__name__}: {exc}"
            return text, handle.delivery

        outcomes = await asyncio.gather(*(send(i) for i in range(4)))
        assert not [o for o in outcomes if str(o[1]).startswith("error")], (rnd, outcomes)
        won = [(text, how) for text, how in outcomes if how is not None]
        assert won, outcomes  # the first to claim the idle session always wins
        taken += [text for text, _ in won]
        deliveries += [str(how) for _, how in won]
        await runtime.wait(sid, timeout=120)
    await runtime.wait(sid, timeout=120)
    texts = await _texts(runtime, sid)
    users = texts[0::2]
    assert sorted(users) == sorted(taken), (texts, deliveries)  # none lost, doubled or refused
    assert texts[1::2] == [f"echo: {t}" for t in users], texts  # each answered once
    # Both sides of the race were run: messages to a live workflow, and after hibernation.
    assert {"started", "delivered"} <= set(deliveries[1:]), deliveries
    # Every workflow that ended, ended by hibernating (none was cut short).
    found = await DBOS.list_workflows_async(name=names.PERSISTENT_WORKFLOW)
    statuses = [(w.workflow_id, w.status) for w in found]
    assert {w.status for w in found} <= {"SUCCESS", "PENDING"}, statuses
    assert sum(1 for w in found if w.status == "PENDING") <= 1, statuses
    assert len(found) == deliveries.count("started"), (statuses, deliveries)


async def test_a_message_claimed_while_its_workflow_hibernates_is_not_lost(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message reads the session's mark (the live workflow) and claims the session in one
    transaction, and the workflow's idle hibernation cannot commit in between: here the
    message's transaction lingers after reading the mark for as long as the workflow's idle
    TTL takes to lapse. The hibernation waits for the claim, finds the session claimed and
    reads its inbox again, so the message is answered. (On SQLite the reads of a transaction
    used to run before its lock was taken: the workflow hibernated in between and the message
    went to the inbox of a workflow that had ended, never answered.)"""
    ttl = 0.5
    runtime = await make_runtime([keeper_agent(idle_ttl=ttl)])
    first = await runtime.start("keeper", "m0")
    sid = first.session_id
    await runtime.wait(sid, timeout=60)
    hibernated = asyncio.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if getattr(record, "event", None) == "persistent.hibernated":
                hibernated.set()

    seen = Seen()
    logging.getLogger("helix_dbos").addHandler(seen)
    real = persistent.open_turn  # type: ignore[attr-defined]

    async def lingering(*args: Any, **kwargs: Any) -> Any:
        # Past the mark's read: give the workflow's TTL (and more) to hibernate meanwhile.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(hibernated.wait(), timeout=ttl * 6)
        return await real(*args, **kwargs)

    monkeypatch.setattr(persistent, "open_turn", lingering)
    try:
        second = await runtime.start("keeper", "m1", session_id=sid)
        monkeypatch.setattr(persistent, "open_turn", real)
        end = await runtime.wait(sid, timeout=60)
    finally:
        logging.getLogger("helix_dbos").removeHandler(seen)
    assert second.delivery == "delivered"
    assert end["status"] == "completed", end
    assert await _texts(runtime, sid) == ["m0", "echo: m0", "m1", "echo: m1"]


def _delegating(request: LLMRequest) -> LLMResponse:
    """'delegate ...' asks the helper sub-agent; any other user message is echoed."""
    last = request.messages[-1]
    if last.role == "user":
        if last.content.startswith("delegate"):
            return call(request, ("subagent__helper", {"message": last.content}))
        return reply(f"echo: {last.content}")
    return reply(f"helper said: {last.content}")


async def test_a_persistent_agent_runs_sub_agents_and_deadlines(
    make_runtime: MakeRuntime,
) -> None:
    """A sub-agent runs as a standard child turn of the persistent workflow; a client call's
    deadline lapses as in a standard turn; the workflow takes the next message after each."""
    helper = define_agent("helper", llm=ScriptedLLM(lambda r: reply("done it")))
    boss = define_agent(
        "boss", llm=ScriptedLLM(_delegating), subagents=[helper], persistent=True, idle_ttl=30
    )
    runtime = await make_runtime([boss, keeper_agent(timeout=1.0)])
    first = await runtime.start("boss", "delegate the chores")
    sid = first.session_id
    assert (await runtime.wait(sid))["status"] == "completed"
    assert (await _texts(runtime, sid))[-1].startswith('helper said: {"text": "done it"')
    nxt = await runtime.start("boss", "thanks", session_id=sid)
    assert nxt.delivery == "delivered"
    await runtime.wait(sid)
    assert (await _texts(runtime, sid))[-1] == "echo: thanks"

    timed = await runtime.start("keeper", "1 edit")
    assert (await runtime.wait(timed.session_id))["status"] == "completed"
    assert (await _texts(runtime, timed.session_id))[-1] == "results: client_tool_timeout"
    again = await runtime.start("keeper", "hi", session_id=timed.session_id)
    assert again.delivery == "delivered"
    await runtime.wait(timed.session_id)


async def test_start_over_http_answers_the_delivery(make_runtime: MakeRuntime) -> None:
    """``POST /start`` to a persistent agent answers ``delivery``: started, then delivered."""
    runtime = await make_runtime([keeper_agent()])
    app = FastAPI()
    app.include_router(create_router(runtime, allow_unauthenticated=True))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://helix") as client:
        first = await client.post("/start", json={"agentType": "keeper", "message": "hi"})
        assert first.status_code == 200, first.text
        body = first.json()
        assert set(body) == {"sessionId", "runId", "delivery"} and body["delivery"] == "started"
        await runtime.wait(body["sessionId"])
        again = await client.post(
            "/start",
            json={"agentType": "keeper", "message": "again", "sessionId": body["sessionId"]},
        )
        assert again.status_code == 200 and again.json()["delivery"] == "delivered"
        await runtime.wait(body["sessionId"])


async def _live_and_stop(url: str) -> tuple[str, str]:
    """A process whose persistent session is live between turns, stopped cleanly (its
    workflow stays PENDING on its inbox): (session, workflow)."""
    runtime = AgentRuntime(
        [keeper_agent()],
        HelixSettings(database_url=url, executor_id="first", application_version="t"),
    )
    await runtime.launch()
    try:
        handle = await runtime.start("keeper", "hi")
        await runtime.wait(handle.session_id)
    finally:
        await runtime.shutdown()
    assert handle.workflow_id is not None
    return handle.session_id, handle.workflow_id


async def _deliver_to_the_gone(url: str, sid: str, workflow_id: str) -> None:
    # A survivor whose own sweep would not come round for a long time: the delivery adopts.
    survivor = AgentRuntime(
        [keeper_agent()],
        HelixSettings(
            database_url=url,
            executor_id="second",
            application_version="t",
            heartbeat_seconds=300,
            adopt_after_seconds=600,
        ),
    )
    await survivor.launch()
    try:
        assert survivor.fleet is not None
        survivor.fleet._live = {}
        handle = await survivor.start("keeper", "anyone there?", session_id=sid)
        assert handle.delivery == "delivered" and handle.workflow_id == workflow_id
        assert (await survivor.wait(sid, timeout=60))["status"] == "completed"
        texts = [m.content for m in await survivor.messages(sid)]
        assert texts == ["hi", "echo: hi", "anyone there?", "echo: anyone there?"]
    finally:
        await survivor.shutdown()


@pytest.mark.slow
def test_a_message_to_a_gone_executors_live_workflow_is_adopted(pg_url: str) -> None:
    """The fleet: a message delivered to a live workflow whose process is gone adopts it at
    once; the adopted workflow takes the message from its inbox."""
    sid, workflow_id = asyncio.run(_live_and_stop(pg_url))
    asyncio.run(_deliver_to_the_gone(pg_url, sid, workflow_id))
