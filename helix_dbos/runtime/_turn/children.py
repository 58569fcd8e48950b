"""A sub-agent call: the sub-agent's turn runs as a child workflow of the calling turn.

The child's session and run ids derive from the parent's session and the call
(``names.child_session_id``, ``records.child_run_id``), so a replay of the parent re-attaches
to the same child. Its entry is an exactly-once step of the parent (``_commits/opening.py``); its turn's
outcome is the call's result (``resolve.child_result``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from dbos import DBOS, SetWorkflowID
from dbos import error as dbos_error

from .. import names
from .._commits.opening import start_child_session
from ..records import PlanItem, ServerToolResult, TurnOutcome, child_run_id
from .outcomes import check_fence
from .resolve import child_result

__all__ = ["run_child"]


async def run_child(
    session_id: str,
    run_id: str,
    root_session_id: str,
    item: PlanItem,
    workflow: Callable[..., Coroutine[Any, Any, TurnOutcome]],
) -> ServerToolResult | None:
    """Run the sub-agent of ``item`` as a child ``workflow`` (the turn's own) with its own
    session; its reply is the call's result (``None``: the sub-agent's turn hibernated, and
    goes on in its continuation)."""
    child_agent = item["subagent"]
    child_session = names.child_session_id(session_id, item["toolCallId"])
    child_turn = child_run_id(item["toolCallId"])
    started = await start_child_session(
        child_session,
        child_turn,
        child_agent,
        root_session_id,
        session_id,
        run_id,
        str(item["input"].get("message", "")),
    )
    check_fence(started)
    with SetWorkflowID(names.turn_workflow_id(child_session, child_turn)):
        handle = await DBOS.start_workflow_async(
            workflow,
            child_session,
            child_turn,
            child_agent,
            root_session_id,
            layout=names.TURN_LAYOUT,
        )
    try:
        outcome: TurnOutcome = await handle.get_result()
    except dbos_error.DBOSAwaitedWorkflowCancelledError:
        # The child alone was interrupted or aborted: the parent reads a failed result and
        # goes on. (When the parent is stopped too, its next step refuses to run.) DBOS
        # records the awaited error, so a replay takes this same branch.
        return {
            "ok": False,
            "error": "The sub-agent was stopped before it finished.",
            "errorCode": "aborted",
        }
    if outcome.get("outcome") == "hibernated":
        return None
    return child_result(outcome)
