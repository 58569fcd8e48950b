"""A server tool that asks a person first (``core.tools.ToolAsks``; an MCP tool answering
``input_required``): the turn parks on the call as on a client call, and the answer calls the
tool again, once, with it.

The ask is the call's recorded ``helix.turn.server_tool`` result (``asks``), so a replay
finds it again. ``register`` turns the call into a suspending one: its plan item becomes a
``client`` call carrying the questions (recorded with the plan by a hibernate commit), and
one transaction, checkpointed under the step's ``asks`` slot, writes its pending entry (its
``input`` is ``{"arguments", "inputRequests"}``: what a client shows), the ownership entry
and its events, as a model step's commit does for its client calls. From there the wait is
a client call's: ``/status``, hooks, deadlines, hibernation and the submit contract. The
submitted result is the answer (``answer``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from ...core.clock import now_ms
from ...core.events import event
from ...core.session import SessionState
from ...store.store import guard
from .. import names
from .._commits.once import CommitContext, commit_once
from .._context import current
from .._notifications import outbox_rows as notes
from ..records import PlanItem, ServerToolResult, ToolResult
from .server_tool import run_server_tool
from .steps import pending_entries, start_events

if TYPE_CHECKING:
    from .workflow import _Turn

__all__ = ["answer", "register"]


async def register(
    turn: _Turn, step: int, plan: list[PlanItem], results: dict[str, Any], deadlines: dict[str, int]
) -> dict[str, int]:
    """Park the calls of ``step`` whose tool asked (their results leave ``results``); the
    deadlines of the calls the turn parks on, these included."""
    asked = [i for i in plan if "asks" in results.get(i["toolCallId"], {})]
    if not asked:
        return deadlines
    for item in asked:
        item["asks"] = results.pop(item["toolCallId"])["asks"]
        item["kind"] = "client"
        tool = turn.agent.tool(item["toolName"])
        item["timeoutSeconds"] = turn.agent.deadline_seconds(tool) if tool is not None else 300.0
    slot = names.turn_slot(turn.workflow_id, turn.run_id, step, "asks")
    session_id, root_id, run_id = turn.session_id, turn.root_session_id, turn.run_id
    retention = int(turn.agent.completed_tombstone_retention * 1000)

    # What a client reads of each call: its arguments and the questions.
    shown: list[Any] = [
        {**i, "input": {"arguments": i["input"], "inputRequests": i["asks"]["requests"]}}
        for i in asked
    ]

    async def commit() -> dict[str, int]:
        entries = pending_entries(shown, run_id, now_ms(), retention)

        def park(states: dict[str, SessionState]) -> None:
            owner, root = states[session_id], states[root_id]
            guard(owner, run_id, ("running",))
            owner.pending.update(entries)
            owner.status = "suspended_client_tool"
            for tcid in entries:
                root.ownership[tcid] = session_id

        await current().store.update([session_id, root_id], park)
        new = start_events(shown, entries)
        new.append(event("suspended", toolCallIds=list(entries), reason="client_tool"))
        await current().store.append_events(session_id, run_id, new)
        await notes.write(notes.park_rows(session_id, root_id, shown, entries))
        return {k: v.deadline_at for k, v in entries.items()}

    parked = await commit_once(
        CommitContext(slot),
        session_id,
        run_id,
        commit,
        step_count=step,
        session_ids=[session_id, root_id],
    )
    return {**deadlines, **parked}


async def answer(
    agent_type: str, item: PlanItem, entry: dict[str, Any] | None, result: ToolResult
) -> ToolResult:
    """The result of a call that asked, once answered: the tool called again with the answer
    (a recorded step); a submitted error, a lapsed deadline or an abandon is the result as
    is. The answer is the submitted result: one response (``{"action", "content"}``, or the
    content of an ``accept``) when the tool asked one question, else one per question key.
    A tool that asks again fails ``input_required`` (one round). The call's arguments are its
    pending entry's (``entry``: a parked plan item keeps no input)."""
    if not result.get("ok") or entry is None:
        return result
    asks = item["asks"]
    keys = list(asks["requests"])
    given = result.get("result")
    responses = {keys[0]: _response(given)} if len(keys) == 1 else _by_key(given)
    ran: ServerToolResult = await run_server_tool(
        agent_type,
        item["toolName"],
        entry["input"]["arguments"],
        {"responses": responses, "state": asks.get("state")},
    )
    if "asks" in ran:
        ran = {
            "ok": False,
            "error": "The tool asked for input again",
            "errorCode": "input_required",
        }
    return cast(ToolResult, {**result, **ran})


def _response(given: Any) -> dict[str, Any]:
    if isinstance(given, dict) and given.get("action") in ("accept", "decline", "cancel"):
        return given
    return {"action": "accept", "content": given}


def _by_key(given: Any) -> dict[str, Any]:
    if not isinstance(given, dict):
        return {}
    return {key: _response(value) for key, value in given.items()}
