"""Every path that ends or drains a batch pops the stash (ARCHITECTURE.md, rule 5): a new
turn's claim, the end of a turn (``finish_turn``; a failed turn keeps it for its retry) and
the reconciler's end of a lost turn. (A stop: ``test_interrupt.py``; the results commit that
delivers the stashed message: ``test_with_message.py``.)"""

from __future__ import annotations

import asyncio
from typing import Any

from dbos import DBOS

from helix_dbos.core.session import SessionState
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime, names, records
from helix_dbos.runtime._commits.once import CommitContext
from helix_dbos.runtime._turn import steps
from helix_dbos.runtime.records import TurnError, TurnSummary
from tests.runtime.conftest import MakeRuntime
from tests.support.asker import asker, parked, script

LATE = "a message stashed over the batch"


async def _stash(rt: AgentRuntime, sid: str) -> None:
    """Leave what ``resume(with_message)`` leaves on a parked turn's row."""

    def stash(states: dict[str, SessionState]) -> None:
        states[sid].metadata[records.STASH_KEY] = {
            "message": LATE,
            "abandonPending": False,
            "runId": states[sid].run_id,
        }

    await rt.store.update([sid], stash)
    assert records.STASH_KEY in (await rt.session(sid)).metadata


def _summary() -> TurnSummary:
    return {"steps": 1, "clientCalls": 1, "waitMs": 0, "inputTokens": 0, "outputTokens": 0}


async def test_a_new_turns_claim_pops_the_stash(make_runtime: MakeRuntime) -> None:
    """A stash left on an ended session is never delivered to the session's next turn: the
    claim removes it (seen while that turn is parked, before anything else could)."""
    rt = await make_runtime([asker(ScriptedLLM(script))])
    first = await rt.start("asker", "hello")
    assert (await rt.wait(first.session_id))["status"] == "completed"
    await _stash(rt, first.session_id)
    sid, [call] = await parked(rt, "ask", session_id=first.session_id)
    assert records.STASH_KEY not in (await rt.session(sid)).metadata
    await rt.submit_tool_result(sid, call["toolCallId"], result={"text": "blue"})
    assert (await rt.wait(sid))["status"] == "completed"
    assert LATE not in [m.content for m in await rt.messages(sid)]


async def _finish(rt: AgentRuntime, sid: str, outcome: str) -> dict[str, Any]:
    """``finish_turn`` of the session's live run, as its turn would commit it."""
    state = await rt.session(sid)
    run = state.run_id or ""
    slot = names.turn_slot(state.workflow_id or "", run, -1, "finish")
    error: TurnError | None = None
    if outcome != "completed":
        error = {"code": "x", "message": "x", "retryable": True}
    done = await steps.finish_turn.direct(
        CommitContext(slot), sid, run, outcome, "", error, _summary(), sid
    )
    assert "fenced" not in done, done
    return (await rt.session(sid)).metadata


async def test_the_end_of_a_turn_pops_the_stash_and_a_failure_keeps_it(
    make_runtime: MakeRuntime,
) -> None:
    """A turn that ends pops the stash; one that fails keeps it, for its retry to drain."""
    rt = await make_runtime([asker(ScriptedLLM(script))])
    ended, _ = await parked(rt)
    await _stash(rt, ended)
    assert records.STASH_KEY not in await _finish(rt, ended, "completed")
    failed, _ = await parked(rt)
    await _stash(rt, failed)
    assert records.STASH_KEY in await _finish(rt, failed, "failed")


async def test_the_reconcilers_end_of_a_lost_turn_pops_the_stash(make_runtime: MakeRuntime) -> None:
    """A parked turn whose workflow was cancelled behind the runtime: the reconciler ends the
    session, and its stash with it."""
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    sid, _ = await parked(rt)
    await _stash(rt, sid)
    await DBOS.cancel_workflow_async((await rt.session(sid)).workflow_id or "")
    [repair] = await rt.heal(grace_seconds=0)
    assert repair.action == "ended_cancelled"
    state = await rt.session(sid)
    assert state.status == "interrupted"
    assert records.STASH_KEY not in state.metadata


async def test_a_delivered_message_is_popped_with_the_results(make_runtime: MakeRuntime) -> None:
    """The results commit that delivers a stashed message removes it: the model step it
    leads to parks again, and the next results commit does not deliver it a second time."""
    rt = await make_runtime([asker(ScriptedLLM(script))])
    sid, [first] = await parked(rt)
    await rt.resume(sid, "with_message", "ask", abandon_pending=True)
    for _ in range(500):
        [again] = await rt.wait_for_pending(sid)
        if again["toolCallId"] != first["toolCallId"]:
            break
        await asyncio.sleep(0.01)
    assert again["toolCallId"] != first["toolCallId"]
    assert records.STASH_KEY not in (await rt.session(sid)).metadata
    await rt.submit_tool_result(sid, again["toolCallId"], result={"text": "blue"})
    assert (await rt.wait(sid))["status"] == "completed"
    asked = [m.content for m in await rt.messages(sid) if m.role == "user"]
    assert asked == ["ask", "ask"]
