"""Waking a parent for its companions' replies (``Companion.wake_parent``).

A companion declared with ``wake_parent=True`` starts a parent turn, with no user message,
when its reply reaches the parent between turns: right after the reply is appended
(``after_reply``, in the companion's workflow), or, for a reply kept while a parent turn ran,
when that turn ends (``after_turn``, in the parent's workflow; the woken turn's entry appends
what was kept). The wake is one recorded DBOS step (``names.COMPANION_WAKE_STEP``) that claims
the parent for a run derived from what triggered it (``names.companion_wake_run_id``), so a
re-executed wake claims and starts the same run once. A parent already in a turn (someone
else's message came first) is not woken: that turn reads the reply.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Literal

from dbos import DBOS, SetWorkflowID

from ...core.agents import Agent
from ...errors import AgentAlreadyRunningError
from ...observability.log import log_event
from ...store import IntegrityError
from .. import names, records
from .._commits.opening import ACTIVE_STATUSES, open_turn
from .._context import current, rooms
from .._turn.workflow import run_turn
from ..records import TurnOutcome

__all__ = ["after_reply", "after_turn", "wakes"]

Why = Literal["reply", "kept"]


def wakes(agent: Agent) -> bool:
    """Whether a companion of ``agent`` wakes it (``wake_parent``)."""
    return any(c.wake_parent for c in agent.companions)


async def after_turn(session_id: str, agent_type: str, outcome: TurnOutcome) -> None:
    """In a parent's workflow, once its turn ended: wake it for replies kept meanwhile."""
    if outcome["outcome"] in ("completed", "failed") and wakes(current().registry.get(agent_type)):
        await _wake(session_id, str(outcome["runId"]), "kept")


async def after_reply(parent_id: str, parent_type: str, companion: str, run_id: str) -> None:
    """In a companion's workflow, once its reply ``run_id`` was appended to its idle parent."""
    mate = current().registry.get(parent_type).companion(companion)
    if mate is not None and mate.wake_parent:
        await _wake(parent_id, run_id, "reply")


@DBOS.step(name=names.COMPANION_WAKE_STEP)
async def _wake(session_id: str, trigger: str, why: Why) -> str | None:
    """Claim the parent ``session_id`` for its wake run and start it; the run, or ``None``
    when there is nothing to wake (a turn runs, or nothing was kept)."""
    ctx = current()
    run = names.companion_wake_run_id(session_id, trigger)
    state = await ctx.store.load(session_id)
    if state is None:
        return None
    if state.run_id is None or not (state.run_id == run or state.run_id.startswith(f"{run}:")):
        kept = state.metadata.get(records.COMPANION_NOTICES_KEY)
        if state.status in ACTIVE_STATUSES or (why == "kept" and not kept):
            return None
        if why == "kept" and state.run_id != trigger:
            return None  # another turn came since: it read what was kept
        if not await _claim(session_id, state.agent_type, run):
            return None
    elif not ctx.registry.get(state.agent_type).persistent:
        await _start_turn(session_id, run, state.agent_type, state.root_session_id)
    log_event("companion.woke_parent", sessionId=session_id, runId=run, why=why)
    return run


async def _claim(session_id: str, agent_type: str, run: str) -> bool:
    """Claim the parent for ``run`` (no message) and start its turn; ``False`` if busy."""
    ctx = current()
    if ctx.registry.get(agent_type).persistent:
        try:
            await rooms.deliver(ctx, session_id, agent_type, None, run)
        except AgentAlreadyRunningError:
            return False
        return True

    async def body() -> str:
        entered = await open_turn(
            ctx.store, session_id=session_id, agent_type=agent_type, turn_id=run, message=None
        )
        return entered.state.root_session_id

    try:
        root = await ctx.store.transact(body)
    except (AgentAlreadyRunningError, IntegrityError):
        return False
    await _start_turn(session_id, run, agent_type, root)
    return True


async def _start_turn(session_id: str, run: str, agent_type: str, root: str) -> None:
    """Start the woken turn's workflow (by id: once), a workflow of its own."""

    async def start() -> Any:
        with SetWorkflowID(names.turn_workflow_id(session_id, run)):
            return await DBOS.start_workflow_async(
                run_turn, session_id, run, agent_type, root, layout=names.TURN_LAYOUT
            )

    # Not a child of the step's workflow (DBOS refuses a start in a step; it outlives it).
    await asyncio.create_task(start(), context=contextvars.Context())


rooms.after_turn = after_turn
