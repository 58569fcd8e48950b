"""A server tool that asks a person first (``core.tools.ToolAsks``; an MCP tool answering
``input_required``): the turn parks on the call as on a client call or an approval, and the
answer calls the tool again with it; a tool that asks again parks the turn again, round
after round (at most ``MAX_ROUNDS``).

The ask is the call's recorded ``helix.turn.server_tool`` result (``asks``), so a replay
finds it again. ``register`` turns the call into a suspending one: its plan item becomes a
``client`` call carrying the questions, or an ``approval`` when the tool asks only for a
confirmation (``confirmation``: one form of one boolean field), which the approval inbox
then offers. One transaction, checkpointed under the step's ``asks`` slot (``asks:<round>``
from the second round), writes its pending entry (its ``input`` is ``{"arguments",
"inputRequests", "round"}``: what a client shows), the ownership entry and its events, as a
model step's commit does for its client calls. From there the wait is a client call's or an
approval's: ``/status``, the inbox, hooks, deadlines, hibernation (the first round's park)
and the submit contract. The submitted answer calls the tool again (``answer``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from ...core.clock import now_ms
from ...core.events import event
from ...core.session import SessionState
from ...store import guard
from .. import names
from .._commits.once import CommitContext, commit_once
from .._context import current
from .._notifications import outbox_rows as notes
from .._triage import waits
from ..records import PlanItem, ServerToolResult, ToolResult
from .server_tool import run_server_tool
from .steps import pending_entries, rebind, start_events

if TYPE_CHECKING:
    from .workflow import _Turn

__all__ = ["MAX_ROUNDS", "answer", "asked_again", "confirmation", "register", "register_round"]

#: Rounds of questions one call may ask; one more fails the call ``input_required``.
MAX_ROUNDS = 10


def confirmation(requests: dict[str, Any]) -> str | None:
    """The boolean field's name if ``requests`` asks only for a confirmation: one form
    (``elicitation/create``, form mode) whose schema has a single field, a boolean."""
    if len(requests) != 1:
        return None
    request = next(iter(requests.values()))
    params = request.get("params") if isinstance(request, dict) else None
    if request.get("method") != "elicitation/create" or not isinstance(params, dict):
        return None
    if params.get("mode", "form") != "form":
        return None
    schema = params.get("requestedSchema")
    fields = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(fields, dict) or len(fields) != 1:
        return None
    ((name, field),) = fields.items()
    return str(name) if isinstance(field, dict) and field.get("type") == "boolean" else None


async def register(
    turn: _Turn, step: int, plan: list[PlanItem], results: dict[str, Any], deadlines: dict[str, int]
) -> dict[str, int]:
    """Park the calls of ``step`` whose tool asked (their results leave ``results``); the
    deadlines of the calls the turn parks on, these included."""
    asked = [i for i in plan if "asks" in results.get(i["toolCallId"], {})]
    if not asked:
        return deadlines
    for item in asked:
        _suspend(turn, item, results.pop(item["toolCallId"])["asks"], 1)
    return {**deadlines, **await _commit(turn, step, asked, 1)}


def asked_again(suspending: list[PlanItem], results: dict[str, Any]) -> list[PlanItem]:
    """The calls of a batch whose tool, called again with the answer, asked again."""
    return [i for i in suspending if "asks" in results.get(i["toolCallId"], {})]


async def register_round(
    turn: _Turn, step: int, again: list[PlanItem], results: dict[str, Any]
) -> dict[str, int]:
    """Park the calls that asked again (``asked_again``) for their next round: a new pending
    entry replaces the answered one; the deadlines. A call past ``MAX_ROUNDS`` is failed
    ``input_required`` in ``results`` instead."""
    parked: list[PlanItem] = []
    for item in again:
        tcid = item["toolCallId"]
        done = int(item.get("asks", {}).get("round", 1))
        result = results.pop(tcid)
        if done >= MAX_ROUNDS:
            error = f"The tool asked for input more than {MAX_ROUNDS} times"
            result.pop("asks", None)
            results[tcid] = {**result, "ok": False, "error": error, "errorCode": "input_required"}
            continue
        item["input"] = result["asks"].pop("arguments")  # a parked item keeps no input
        _suspend(turn, item, result["asks"], done + 1)
        parked.append(item)
    if not parked:
        return {}
    return await _commit(turn, step, parked, int(parked[0]["asks"]["round"]))


def _suspend(turn: _Turn, item: PlanItem, asks: dict[str, Any], round_: int) -> None:
    """Make ``item`` a suspending call on the questions ``asks`` of round ``round_``."""
    item["asks"] = {**asks, "round": round_}
    item["kind"] = "approval" if confirmation(asks["requests"]) else "client"
    tool = turn.agent.tool(item["toolName"])
    if tool is not None:
        waits(item, turn.agent, tool)
    else:
        item["timeoutSeconds"] = 300.0


async def _commit(turn: _Turn, step: int, asked: list[PlanItem], round_: int) -> dict[str, int]:
    """The one commit of a round's pending entries, once (checkpointed under its slot)."""
    kind = "asks" if round_ == 1 else f"asks:{round_}"
    slot = names.turn_slot(turn.workflow_id, turn.run_id, step, kind)
    session_id, root_id, run_id = turn.session_id, turn.root_session_id, turn.run_id
    retention = int(turn.agent.completed_tombstone_retention * 1000)
    # A later round parks a turn already suspended, perhaps in a hibernated turn's
    # continuation: the row then names that workflow, which the answer must wake.
    statuses = ("running",) if round_ == 1 else ("running", "suspended_client_tool")
    workflow_id = turn.handed.rebind if round_ > 1 else None

    # What a client reads of each call: its arguments and the questions.
    shown: list[Any] = [{**i, "input": shown_input(i)} for i in asked]

    async def commit() -> dict[str, int]:
        at = now_ms()
        entries = pending_entries(shown, run_id, at, retention)
        for tcid, entry in entries.items():
            if entry.approval_id is not None and round_ > 1:  # an approval id per round
                entry.approval_id = names.approval_id(run_id, f"{tcid}#{round_}")

        def park(states: dict[str, SessionState]) -> None:
            owner, root = states[session_id], states[root_id]
            guard(owner, run_id, statuses)
            owner.pending.update(entries)
            owner.status = "suspended_client_tool"
            if workflow_id is not None:
                rebind(owner, workflow_id, at)
            for tcid in entries:
                root.ownership[tcid] = session_id

        await current().store.update([session_id, root_id], park)
        new = start_events(shown, entries)
        new.append(event("suspended", toolCallIds=list(entries), reason="client_tool"))
        await current().store.append_events(session_id, run_id, new)
        await notes.write(notes.park_rows(session_id, root_id, shown, entries))
        return {k: v.deadline_at for k, v in entries.items()}

    return await commit_once(
        CommitContext(slot),
        session_id,
        run_id,
        commit,
        step_count=step,
        session_ids=[session_id, root_id],
    )


def shown_input(item: PlanItem) -> dict[str, Any]:
    """What a client reads of a call that asked: its arguments, the questions, the round."""
    asks = item["asks"]
    return {"arguments": item["input"], "inputRequests": asks["requests"], "round": asks["round"]}


async def answer(
    agent_type: str, item: PlanItem, entry: dict[str, Any] | None, result: ToolResult
) -> ToolResult:
    """The result of a call that asked, once answered: the tool called again with the answer
    (a recorded step), whose result may ask again (``asks``: ``register_round``). A
    submitted error, a denied confirmation, a lapsed deadline or an abandon is the result as
    is. The answer is the submitted result: one response (``{"action", "content"}``, or the
    content of an ``accept``) when the tool asked one question, else one per question key;
    an approved confirmation is ``accept`` with its boolean field true. The call's arguments
    are its pending entry's (``entry``: a parked plan item keeps no input)."""
    run_input = cast(dict[str, Any], result).pop("runInput", None)
    if entry is None or (run_input is None and not result.get("ok")):
        return result
    asks = item["asks"]
    keys = list(asks["requests"])
    if run_input is not None:  # an approved confirmation
        field = confirmation(asks["requests"]) or ""
        responses = {keys[0]: {"action": "accept", "content": {field: True}}}
    else:
        given = result.get("result")
        responses = {keys[0]: _response(given)} if len(keys) == 1 else _by_key(given)
    arguments = entry["input"]["arguments"]
    ran: ServerToolResult = await run_server_tool(
        agent_type,
        item["toolName"],
        arguments,
        {"responses": responses, "state": asks.get("state")},
    )
    if "asks" in ran:  # asked again: the next round shows the same arguments
        ran = {**ran, "asks": {**ran["asks"], "arguments": arguments}}
    return cast(ToolResult, {**result, **ran})


def _response(given: Any) -> dict[str, Any]:
    if isinstance(given, dict) and given.get("action") in ("accept", "decline", "cancel"):
        return given
    return {"action": "accept", "content": given}


def _by_key(given: Any) -> dict[str, Any]:
    if not isinstance(given, dict):
        return {}
    return {key: _response(value) for key, value in given.items()}
