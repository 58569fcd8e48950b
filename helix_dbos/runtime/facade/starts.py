"""A runtime's entries: claim a session for a new run, commit its entry and start its turn
workflow (a new session's, an existing session's next turn, a persistent session's message)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from dbos import DBOS, SetWorkflowID

from ...core.owner import SessionOwner
from ...errors import AgentAlreadyRunningError
from ...observability.log import log_event
from ...store.connection import IntegrityError
from .. import names, records
from ..commits.opening import open_turn
from ..companions import persistent
from ..handover import EntryInputs
from ..turn.first_model_step import start_first_step
from ..turn.workflow import run_turn
from .turn_handle import TurnHandle

if TYPE_CHECKING:
    from .runtime import AgentRuntime

__all__ = ["enter"]


async def enter(
    rt: AgentRuntime,
    session_id: str,
    agent_type: str,
    message: str | None,
    *,
    new: bool = False,
    owner: SessionOwner | None = None,
) -> TurnHandle:
    """Claim the session for a new run, commit its entry and start its turn.

    ``new``: the caller made the session id up (``start`` without one): see
    ``_enter_new``. ``owner``: recorded if the session is created.
    """
    turn_id = records.new_run_id()
    if rt.registry.get(agent_type).persistent:
        return await _enter_persistent(rt, session_id, agent_type, message, turn_id, owner)
    if new:
        return await _enter_new(rt, session_id, agent_type, message, turn_id, owner)
    entry = await _open(rt, session_id, agent_type, message, turn_id, new=False, owner=owner)
    # The claim is committed; a crash before the workflow below starts leaves it without a
    # workflow, and the reconciler (``heal``) starts that workflow under the same id. The
    # workflow starts only now: a refused claim (the session is busy) leaves none behind.
    # The first model step starts from the entry alongside DBOS's start, as in
    # ``_enter_new``.
    state = entry.state
    workflow_id = names.turn_workflow_id(session_id, turn_id)
    rt.ctx.handovers.open(workflow_id).set_result(
        start_first_step(
            workflow_id, session_id, turn_id, state.agent_type, state.root_session_id, entry
        )
    )
    try:
        workflow = await _start_turn(
            workflow_id, session_id, turn_id, state.agent_type, state.root_session_id
        )
    except BaseException:
        rt.ctx.handovers.close(workflow_id)  # stops the first step too
        raise
    rt._remember(workflow_id, workflow)
    return TurnHandle(session_id, turn_id, workflow_id, workflow)


async def _open(
    rt: AgentRuntime,
    session_id: str,
    agent_type: str,
    message: str | None,
    turn_id: str,
    *,
    new: bool,
    owner: SessionOwner | None = None,
) -> EntryInputs:
    """Commit the entry of ``turn_id`` (``entry.open_turn``)."""
    try:
        return await rt.store.transact(
            lambda: open_turn(
                rt.store,
                session_id=session_id,
                agent_type=agent_type,
                turn_id=turn_id,
                message=message,
                new=new,
                owner=owner,
            )
        )
    except IntegrityError:
        # Two starts raced to create the same new session: the other one won.
        raise AgentAlreadyRunningError(
            f"Session {session_id!r} already has a turn running", sessionId=session_id
        ) from None


async def _enter_new(
    rt: AgentRuntime,
    session_id: str,
    agent_type: str,
    message: str | None,
    turn_id: str,
    owner: SessionOwner | None = None,
) -> TurnHandle:
    """A new session's first turn: its entry commits while DBOS starts its workflow.

    Each one's round trips overlap the other's. Once the entry has committed, the turn's
    first model step starts from it, still alongside DBOS's start, and the turn takes
    the running step (``handover.py``). A crash between them is repaired either way: a
    claim without its workflow is started by the reconciler (``heal``), and its turn
    finds the first step's answer recorded, or runs the step; a workflow without its
    entry finds no session and ends, writing nothing.
    """
    workflow_id = names.turn_workflow_id(session_id, turn_id)
    handover = rt.ctx.handovers.open(workflow_id)
    starting = asyncio.ensure_future(
        _start_turn(workflow_id, session_id, turn_id, agent_type, session_id)
    )
    try:
        entry = await _open(rt, session_id, agent_type, message, turn_id, new=True, owner=owner)
    except BaseException:
        handover.set_result(None)  # the turn ends at once
        # Not awaited: with the database down, DBOS's start waits for it to come back,
        # and the caller must get the entry's error now.
        starting.add_done_callback(lambda done: _started_without_entry(rt, workflow_id, done))
        raise
    handover.set_result(
        start_first_step(workflow_id, session_id, turn_id, agent_type, session_id, entry)
    )
    try:
        workflow = await starting
    except BaseException:
        rt.ctx.handovers.close(workflow_id)  # stops the first step too
        raise
    rt._remember(workflow_id, workflow)
    return TurnHandle(session_id, turn_id, workflow_id, workflow)


def _started_without_entry(
    rt: AgentRuntime, workflow_id: str, starting: asyncio.Future[Any]
) -> None:
    """A turn started for an entry that failed (it ends at once when it runs): kept for
    the shutdown's grace wait like any turn; a start that failed is only logged."""
    if not starting.cancelled() and starting.exception() is None:
        rt._remember(workflow_id, starting.result())
        return
    rt.ctx.handovers.close(workflow_id)
    error = "cancelled" if starting.cancelled() else type(starting.exception()).__name__
    log_event("turn.start_failed", workflowId=workflow_id, error=error)


async def _enter_persistent(
    rt: AgentRuntime,
    session_id: str,
    agent_type: str,
    message: str | None,
    turn_id: str,
    owner: SessionOwner | None = None,
) -> TurnHandle:
    """A persistent session's message: to its live workflow's inbox, or a new workflow."""
    entered = await persistent.deliver(
        rt.ctx, session_id, agent_type, message, turn_id, owner=owner
    )
    rt._remember(entered.workflow_id, entered.workflow)
    if entered.delivery == "delivered" and rt.fleet is not None:
        # The live workflow's process may be gone: adopt it now, not at the next sweep.
        await rt.fleet.ensure_runner(session_id)
    return TurnHandle(
        session_id,
        turn_id,
        entered.workflow_id,
        persistent.TurnResult(entered.workflow_id, turn_id, session_id),
        delivery=entered.delivery,
    )


async def _start_turn(
    workflow_id: str, session_id: str, turn_id: str, agent_type: str, root_session_id: str
) -> Any:
    """Start the turn workflow of a new run."""
    with SetWorkflowID(workflow_id):
        return await DBOS.start_workflow_async(
            run_turn, session_id, turn_id, agent_type, root_session_id, layout=names.TURN_LAYOUT
        )
