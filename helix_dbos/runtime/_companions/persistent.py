"""Persistent agents: a session's turns run in ONE long-lived workflow fed by its inbox.

An agent declared ``persistent=True`` runs each root session as one ``helix.persistent``
workflow (id ``helix:<session>:persistent:<first run>``). The workflow runs a turn (the same
``_Turn`` as a standard turn: its own run id, its steps fenced by that run), then waits on
``DBOS.recv("inbox")`` for the next one. Client calls park on their own topics (the calls'
ids) inside the same workflow, so the two never interfere.

Who takes the next message is written on the session: ``metadata["persistent"]`` names the
LIVE workflow (``records.PersistentMark``). A message (``deliver``) claims the session for a
new run and commits its entry, in ONE transaction that also either

* enqueues ``{"kind": "turn", "runId"}`` in the marked workflow's inbox
  (enlisted in the transaction, ``wake.send_in_transaction``): ``delivered``; or
* marks a new workflow (no live one), started right after the commit: ``started``.

After ``idle_ttl`` seconds without a message the workflow hibernates: ``hibernate`` removes
the mark by compare-and-swap, which wins only while the session is between turns and still
names this workflow. Delivery holds the session's row for its whole transaction (a row lock
on Postgres, the write lock on SQLite), so the two are serialized: either the message was
enqueued first (the swap finds the session claimed, answers ``continue``, and the workflow
reads its inbox again: the message is there), or the mark was removed first (the message
starts a new workflow). A message is never lost and never taken twice (the inbox message's
idempotency key is its run).

A stop (interrupt, abort) cancels the workflow and removes the mark in the transaction that
records it: the workflow ends, and the next message starts a new one. Recovery, deadlines,
sub-agents (standard turns, children of this workflow) and the fleet are the standard
mode's; the reconciler starts a marked workflow whose start was lost and leaves a live one
waiting on its inbox alone.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from dbos import DBOS, SetWorkflowID

from ...core.clock import now_ms
from ...core.owner import SessionOwner
from ...core.session import SessionState
from ...errors import AgentAlreadyRunningError, HelixError
from ...observability.log import log_event
from ...store import IntegrityError, NoChange, SessionStore, patience
from .. import names, records
from .._commits.opening import ACTIVE_STATUSES, open_turn
from .._context import RuntimeContext, current, rooms, workflow_task
from .._hibernated.continuation import continuation_of
from .._turn.outcomes import stopped_outcome
from .._turn.wake import SendNotEnlisted, send_in_transaction, send_to_turn, wake_local
from .._turn.workflow import _Turn
from . import replies, wake_parent

__all__ = [
    "Delivery",
    "Entered",
    "TurnResult",
    "deliver",
    "hibernate",
    "live_workflow",
    "run_persistent",
    "start_persistent",
]

Delivery = Literal["started", "delivered"]
"""How a message reached a persistent session: it started a workflow, or went to a live one."""

_LIVE = frozenset({"PENDING", "ENQUEUED"})


def live_workflow(state: SessionState) -> str | None:
    """The workflow the session's mark names as live (takes the next message), if any."""
    mark = state.metadata.get(records.PERSISTENT_KEY)
    if isinstance(mark, dict) and isinstance(mark.get("workflowId"), str):
        return str(mark["workflowId"])
    return None


@DBOS.workflow(name=names.PERSISTENT_WORKFLOW)
async def run_persistent(
    session_id: str, run_id: str, agent_type: str, root_session_id: str, layout: int = 1
) -> dict[str, Any]:
    """Run ``run_id``'s turn (its entry is committed), then each turn the inbox hands over,
    until the session has been idle for the agent's ``idle_ttl``. Its turns record
    ``layout`` (``names.TURN_LAYOUT``; 1 for a workflow recorded before the argument)."""
    with patience(None), workflow_task():
        turn = _Turn(session_id, run_id, agent_type, root_session_id, layout)
        return await serve_inbox(turn, run_id)


async def serve_inbox(turn: _Turn, run_id: str) -> dict[str, Any]:
    """In a persistent session's workflow: run ``turn`` (published under ``run_id``), then
    each turn its inbox hands over, until the workflow hibernates or is released, or a turn
    hibernates on a batch (its continuation serves the inbox from then on)."""
    session_id, agent_type = turn.session_id, turn.agent_type
    root_session_id, layout = turn.root_session_id, turn.layout
    workflow_id = DBOS.workflow_id or ""
    turns = 0
    while True:
        outcome = await turn.run()
        del turn  # the next turn's object replaces it; this frame lives between turns
        await replies.report(session_id, run_id, root_session_id, outcome)
        await wake_parent.after_turn(session_id, agent_type, outcome)
        # The turn's result, for its handle (``TurnResult``): the workflow's own outlives it.
        await DBOS.set_event_async(names.turn_outcome_event(run_id), outcome)
        turns += 1
        ended: Literal["hibernated", "released"] = "hibernated"
        if outcome["outcome"] == "hibernated":
            following = None
        else:
            following, ended = await _next_turn(session_id, workflow_id, agent_type)
        if following is None:
            log_event(
                "persistent.ended",
                sessionId=session_id,
                workflowId=workflow_id,
                ended=ended,
                turns=turns,
            )
            result: records.PersistentOutcome = {
                "turns": turns,
                "ended": ended,
                "lastRunId": run_id,
            }
            return dict(result)
        run_id = following
        turn = _Turn(session_id, run_id, agent_type, root_session_id, layout)


async def _next_turn(
    session_id: str, workflow_id: str, agent_type: str
) -> tuple[str | None, Literal["hibernated", "released"]]:
    """Wait on the inbox for the next turn's run; ``(None, how)`` when the workflow ends."""
    ctx = current()
    ttl = ctx.registry.get(agent_type).idle_ttl
    while True:
        # Idle in the inbox counts as parked: a clean shutdown does not wait for it.
        ctx.parked.add(workflow_id)
        try:
            message = await DBOS.recv_async(names.INBOX_TOPIC, timeout_seconds=ttl)
        finally:
            ctx.parked.discard(workflow_id)
        if isinstance(message, dict) and message.get("kind") == "turn":
            return str(message["runId"]), "hibernated"
        if message is not None:
            continue  # not ours to read (a stray send): only an idle TTL hibernates
        action = await hibernate(session_id, workflow_id)
        if action != "continue":
            return None, action


@DBOS.step(name=names.PERSISTENT_HIBERNATE_STEP)
async def hibernate(session_id: str, workflow_id: str) -> records.HibernateAction:
    """End an idle workflow's claim on its session (compare-and-swap on the session's row).

    ``hibernated``: the session is between turns and marks this workflow; the mark is removed
    (the next message starts a new workflow). ``continue``: a turn was claimed for this
    workflow meanwhile; its message is in the inbox. ``released``: the session marks another
    workflow, or none (a stop released it): nothing can reach this one any more.
    """

    def swap(states: dict[str, SessionState]) -> records.HibernateAction:
        s = states[session_id]
        if live_workflow(s) != workflow_id:
            raise NoChange("released")
        if s.status in ACTIVE_STATUSES:
            raise NoChange("continue")
        del s.metadata[records.PERSISTENT_KEY]
        return "hibernated"

    _, action = await current().store.update([session_id], swap)
    if action == "hibernated":
        log_event("persistent.hibernated", sessionId=session_id, workflowId=workflow_id)
    return action


class Entered:
    """A message's claim on a persistent session, committed: what ``deliver`` returns."""

    def __init__(self, state: SessionState, run_id: str, workflow_id: str, delivery: Delivery):
        self.state = state
        self.run_id = run_id
        self.workflow_id = workflow_id
        self.delivery: Delivery = delivery
        self.workflow: Any = None
        """The DBOS handle, when this call started the workflow."""


async def deliver(
    ctx: RuntimeContext,
    session_id: str,
    agent_type: str,
    message: str | None,
    run_id: str,
    *,
    owner: SessionOwner | None = None,
    parent: tuple[str, str] | None = None,
    within: Callable[[], Awaitable[None]] | None = None,
) -> Entered:
    """Claim ``session_id`` for ``run_id`` and hand the turn to its live workflow, or start one.

    ``owner``: recorded if the session is created. ``parent``: ``(parent, root)`` of a
    companion's session, recorded if it is created. ``within``: called first in the unit of
    work (a companion's send fences its parent there).

    Raises:
        AgentAlreadyRunningError: a turn of the session is running or parked (as for a
            standard session; deliver over pending calls with ``resume(with_message)``).
    """
    store = ctx.store
    stale = await _stale_mark(ctx, session_id)

    async def body() -> tuple[SessionState, str, Delivery, str]:
        # The claim and its entry, with the mark of a new workflow or the live one's message.
        if within is not None:
            await within()
        existing = await store.load(session_id)
        live = None if existing is None else await _live_holding_row(store, session_id, stale)
        workflow_id = live or names.persistent_workflow_id(session_id, run_id)
        entered = await open_turn(
            store,
            session_id=session_id,
            agent_type=agent_type,
            turn_id=run_id,
            message=message,
            workflow_id=workflow_id,
            metadata={records.PERSISTENT_KEY: _mark(workflow_id)} if existing is None else None,
            owner=owner,
            parent_session_id=parent[0] if parent else None,
            root_session_id=parent[1] if parent else None,
        )
        state = entered.state
        if live is None:
            if existing is not None:
                saved, _ = await store.update(
                    [session_id],
                    lambda states: _set_mark(states[session_id], workflow_id),
                )
                state = saved[session_id]
            return state, workflow_id, "started", "none"
        if ctx.client is None:
            return state, workflow_id, "delivered", "unavailable"
        await _enqueue_turn(ctx, workflow_id, session_id, run_id)
        return state, workflow_id, "delivered", "sent"

    try:
        state, workflow_id, delivery, sent = await store.transact(body)
    except IntegrityError:
        raise AgentAlreadyRunningError(
            f"Session {session_id!r} already has a turn running", sessionId=session_id
        ) from None
    entered = Entered(state, run_id, workflow_id, delivery)
    if stale is not None and delivery == "started":
        log_event("persistent.mark_stale", sessionId=session_id, workflowId=stale)
    await _hand_over(ctx, entered, sent)
    log_event(
        "persistent.delivered",
        sessionId=session_id,
        runId=run_id,
        workflowId=workflow_id,
        delivery=delivery,
    )
    return entered


async def _live_holding_row(store: SessionStore, session_id: str, stale: str | None) -> str | None:
    """In the delivery's transaction: the workflow an existing session's mark names as live,
    or ``None`` (no mark, or the mark names ``stale``: a new workflow starts instead)."""
    # Read the mark holding the row (FOR UPDATE on Postgres, the write lock on SQLite)
    # until this transaction ends: a hibernation cannot slip in before the inbox's message.
    _, live = await store.update(
        [session_id],
        lambda states: _no_change(live_workflow(states[session_id])),
    )
    return None if live == stale else live


async def _enqueue_turn(
    ctx: RuntimeContext, workflow_id: str, session_id: str, run_id: str
) -> None:
    """In the delivery's transaction: put the turn ``run_id`` in the live workflow's inbox
    (a DBOS message written with the claim, keyed by the run so it is taken once).

    Raises:
        HelixError: (retryable) the message could not be enlisted in the transaction.
    """
    inbox: records.InboxMessage = {"kind": "turn", "runId": run_id}
    try:
        await send_in_transaction(
            ctx,
            workflow_id,
            inbox,
            names.INBOX_TOPIC,
            names.inbox_idempotency_key(run_id),
            sessionId=session_id,
            runId=run_id,
        )
    except SendNotEnlisted:
        # The claim must not commit without its message: nothing would run the turn.
        raise HelixError(
            "The message could not be handed to the session's workflow; nothing was "
            "recorded, send it again",
            retryable=True,
            sessionId=session_id,
        ) from None


async def _hand_over(ctx: RuntimeContext, entered: Entered, sent: str) -> None:
    """After the delivery committed: start the workflow it marked, or make sure the live one
    reads its inbox (``sent``: how the transaction left the inbox message, ``sent`` or
    ``unavailable`` when this process has no DBOS client to enlist it)."""
    if entered.delivery == "started":
        # Committed first: a crash before this start leaves the claim to the reconciler,
        # which starts the workflow under the same id.
        entered.workflow = await start_persistent(
            entered.state, entered.run_id, entered.workflow_id
        )
    elif sent == "unavailable":
        inbox_late: records.InboxMessage = {"kind": "turn", "runId": entered.run_id}
        await send_to_turn(
            ctx,
            entered.workflow_id,
            inbox_late,
            names.INBOX_TOPIC,
            names.inbox_idempotency_key(entered.run_id),
        )
    elif ctx.messenger is None:
        # The in-process wake-up (as ``send_to_turn`` gives): a workflow parked on its inbox
        # in this process reads the committed message at once.
        wake_local(entered.workflow_id, names.INBOX_TOPIC)


async def _stale_mark(ctx: RuntimeContext, session_id: str) -> str | None:
    """The workflow the session's mark names if it ended without hibernating (an operator
    cancelled it, say): a new message starts a new workflow instead.

    Such a workflow stays ended, so this is read before the message's transaction (DBOS's
    status is not ours to lock, and the row lock is not held across a query elsewhere)."""
    seen = await ctx.store.load(session_id)
    marked = live_workflow(seen) if seen is not None else None
    if seen is None or marked is None or seen.status in ACTIVE_STATUSES:
        return None
    return None if await _still_running(ctx, marked) else marked


class TurnResult:
    """Waits for one turn of a persistent workflow: ``get_result`` returns the turn's outcome
    (as a standard turn's workflow result), published by the workflow under
    ``names.turn_outcome_event``. A turn whose workflow ended without publishing it (an
    interrupt or abort cancelled it) answers ``outcome: "stopped"``. A turn that hibernated
    is followed into its continuation, which publishes the rest under the run it continues."""

    def __init__(self, workflow_id: str, run_id: str, session_id: str = "") -> None:
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.session_id = session_id

    async def get_result(self, poll_seconds: float = 5.0) -> dict[str, Any]:
        workflow_id, run_id = self.workflow_id, self.run_id
        while True:
            outcome = await _published(workflow_id, run_id, poll_seconds)
            if outcome.get("outcome") != "hibernated" or not self.session_id:
                return outcome
            run_id = str(outcome["runId"])
            continue_as = outcome.get("continueAs")
            continuation = await continuation_of(self.session_id, run_id, workflow_id=continue_as)
            if continuation is None:
                return dict(stopped_outcome(run_id))
            workflow_id = continue_as or names.continuation_workflow_id(self.session_id, run_id)


async def _published(workflow_id: str, run_id: str, poll_seconds: float) -> dict[str, Any]:
    """The outcome ``workflow_id`` publishes for the turn ``run_id``; ``stopped`` if it ended
    without publishing one."""
    key = names.turn_outcome_event(run_id)
    while True:
        outcome = await DBOS.get_event_async(workflow_id, key, poll_seconds)
        if outcome is not None:
            return dict(outcome)
        if not await _still_running(current(), workflow_id):
            outcome = await DBOS.get_event_async(workflow_id, key, 0)
            if outcome is not None:
                return dict(outcome)
            return dict(stopped_outcome(run_id))


async def start_persistent(state: SessionState, run_id: str, workflow_id: str) -> Any:
    """Start the persistent workflow ``workflow_id`` at the claimed run ``run_id`` (DBOS
    returns the existing one when it already started under that id).

    Started in a context of its own: a companion's send, a step of its parent's turn, starts
    a workflow that outlives that turn, never a child of it (DBOS refuses a start in a step).
    """

    async def start() -> Any:
        with SetWorkflowID(workflow_id):
            return await DBOS.start_workflow_async(
                run_persistent,
                state.session_id,
                run_id,
                state.agent_type,
                state.root_session_id,
                layout=names.TURN_LAYOUT,
            )

    return await asyncio.create_task(start(), context=contextvars.Context())


async def _still_running(ctx: RuntimeContext, workflow_id: str) -> bool:
    found = await ctx.dbos().list_workflows_async(
        workflow_ids=[workflow_id], load_input=False, load_output=False
    )
    # Not found (never started, and the session is not claimed either): stale as well.
    return bool(found) and found[0].status in _LIVE


def _mark(workflow_id: str) -> dict[str, Any]:
    mark: records.PersistentMark = {"workflowId": workflow_id, "since": now_ms()}
    return dict(mark)


def _set_mark(state: SessionState, workflow_id: str) -> None:
    state.metadata[records.PERSISTENT_KEY] = _mark(workflow_id)


def _no_change(value: Any) -> Any:
    raise NoChange(value)


rooms.serve_inbox = serve_inbox
rooms.deliver = deliver
