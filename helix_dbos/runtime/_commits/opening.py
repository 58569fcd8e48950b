"""Opening a turn: claim the session, heal the history, commit the entry message.

A turn's entry is committed before its workflow starts (for a root turn) or inside a
exactly-once step of the parent (for a sub-agent), so the workflow itself only runs steps.

A session whose turn is running or parked refuses the claim (``busy_error``). A parked turn
ends only when someone acts (an answer, an interrupt, a message that abandons its calls), so
that refusal is NOT retryable and says what would end the wait; a running turn ends on its
own, so retrying is right. ``waiting_for`` is the same distinction in the status view.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...core.events import event
from ...core.markers import companion_notification, mark_entry_input
from ...core.messages import Message
from ...core.owner import SessionOwner
from ...core.pairing import not_executed_results
from ...core.session import CallKind, PendingCall, SessionState
from ...errors import AgentAlreadyRunningError, SessionNotFoundError
from ...store import NoChange, SessionStore, guard
from .. import names
from .._context import current
from .._handover import EntryInputs
from ..records import COMPANION_NOTICES_KEY, STASH_KEY, ChildStarted, FencedResult
from .once import exactly_once

__all__ = [
    "ACTIVE_STATUSES",
    "WAIT_KINDS",
    "busy_error",
    "entry_messages",
    "open_turn",
    "start_child_session",
    "waiting_for",
]

ACTIVE_STATUSES = frozenset({"running", "suspended_client_tool"})

#: ``waitingFor``'s values, by the kind of a pending call, in the order they are listed.
WAIT_KINDS: dict[CallKind, str] = {"approval": "approval", "client": "client_tool"}


def waiting_for(kinds: Iterable[str]) -> list[str]:
    """``waitingFor``: the kinds of the unanswered calls (``approval``, ``client_tool``),
    each once, in that order; ``[]`` when no call waits for an answer."""
    seen = set(kinds)
    return [WAIT_KINDS[k] for k in ("approval", "client") if k in seen]


def _describe(call: PendingCall) -> str:
    what = "an approval of" if call.kind == "approval" else "the client tool"
    return f"{what} {call.tool_name} (call {call.tool_call_id})"


def busy_error(state: SessionState) -> AgentAlreadyRunningError:
    """The refusal of a new entry on ``state``, a session whose turn is running or parked:
    not retryable while a call (its own, or a sub-agent's) waits for an answer."""
    sid = state.session_id
    awaited = sorted(
        (p for p in state.pending.values() if p.submitted_at is None), key=lambda p: p.index
    )
    if awaited:
        return AgentAlreadyRunningError(
            f"Session {sid!r} is waiting for "
            + " and ".join(_describe(p) for p in awaited)
            + f"; answer {'it' if len(awaited) == 1 else 'them'} (submit-tool-result), "
            "interrupt the session, or deliver the message over the calls with resume "
            "(with_message, abandonPending)",
            retryable=False,
            sessionId=sid,
            runId=state.run_id,
            waitingFor=waiting_for(p.kind for p in awaited),
            awaitedToolCallIds=[p.tool_call_id for p in awaited],
        )
    children = {tcid: owner for tcid, owner in state.ownership.items() if owner != sid}
    if children:
        listed = ", ".join(f"{tcid} of {owner}" for tcid, owner in sorted(children.items()))
        return AgentAlreadyRunningError(
            f"Session {sid!r} is waiting for calls of its sub-agents ({listed}); answer "
            "them (submit-tool-result on this session) or interrupt the session",
            retryable=False,
            sessionId=sid,
            runId=state.run_id,
            awaitedToolCallIds=sorted(children),
        )
    doing = "continuing (its calls are answered)" if state.pending else "running"
    return AgentAlreadyRunningError(
        f"Session {sid!r} has a turn {doing}; start again once it ends, or interrupt it",
        sessionId=sid,
        runId=state.run_id,
    )


def entry_messages(message: str | None, turn_id: str) -> list[Message]:
    """The rows a turn's entry appends for ``message``: it, marked as the turn's own input."""
    if message is None:
        return []
    return [mark_entry_input(Message(role="user", content=message), turn_id)]


async def open_turn(
    store: SessionStore,
    *,
    session_id: str,
    agent_type: str,
    turn_id: str,
    message: str | None,
    root_session_id: str | None = None,
    parent_session_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    workflow_id: str | None = None,
    new: bool = False,
    owner: SessionOwner | None = None,
) -> EntryInputs:
    """Claim ``session_id`` for a new turn (creating it if new) and commit its entry.

    Returns the claimed row and the live conversation as this transaction leaves it (the
    turn's first model step can start from them: ``handover``). The entry message is marked
    as the turn's own input, after companion replies kept (``companion_replies``).
    ``workflow_id`` runs the turn (default: its own, ``names.turn_workflow_id``). ``new``: the
    caller made ``session_id`` up, so it is not read first (one that exists after all fails
    the insert with ``IntegrityError``). ``owner``: recorded if the session is created here.

    Raises:
        AgentAlreadyRunningError: a turn of the session is running (retryable) or parked
            (not retryable: ``busy_error`` names what it waits for).
    """
    workflow_id = workflow_id or names.turn_workflow_id(session_id, turn_id)
    existing = None
    history: list[Message] = []  # a new session has no log to heal
    if not new:
        # Read first, unlocked (the store reads it apart from the unit, which then commits in
        # one statement), yet whole: the claim swaps from this row, not active. A write to a conversation moves its row's version (a
        # lost swap runs this again), or, with no swap, is made under the row's lock by a
        # commit fenced on an active status, which cannot land on this row (ARCHITECTURE.md,
        # rule 26).
        try:
            read, history = await store.resume_inputs(session_id, ())
            existing = read[session_id]
            store.read_earlier([existing])  # the claim swaps from it: no second read
        except SessionNotFoundError:
            pass
    history_tail: list[Message] = []
    if existing is None:
        state = await store.create_session(
            SessionState(
                session_id=session_id,
                agent_type=agent_type,
                root_session_id=root_session_id or session_id,
                parent_session_id=parent_session_id,
                status="running",
                run_id=turn_id,
                workflow_id=workflow_id,
                metadata=metadata or {},
                principal=owner.principal if owner else None,
                tenant=owner.tenant if owner else None,
            ),
        )
    else:

        def claim(states: dict[str, SessionState]) -> list[dict[str, Any]]:
            s = states[session_id]
            if s.status in ACTIVE_STATUSES:
                raise busy_error(s)  # says what the turn waits for, and whether to retry
            s.status, s.run_id, s.workflow_id, s.error = "running", turn_id, workflow_id, None
            s.metadata.pop(STASH_KEY, None)
            return list(s.metadata.pop(COMPANION_NOTICES_KEY, None) or [])

        saved, notices = await store.update([session_id], claim)
        state, history_tail = saved[session_id], [companion_notification(n) for n in notices]
    # An interrupted turn can leave tool_use without tool_result; every provider rejects that.
    healed = not_executed_results(history) + history_tail
    entry = entry_messages(message, turn_id)
    await store.append_messages(session_id, turn_id, healed + entry)
    events = [event("turn_start", runId=turn_id, agentType=state.agent_type)]
    if message is not None:
        events.append(event("user_message", text=message))
    await store.append_events(session_id, turn_id, events)
    return EntryInputs(state, [*history, *healed, *entry])


async def start_child_session(
    child_session_id: str,
    child_turn_id: str,
    agent_type: str,
    root_session_id: str,
    parent_session_id: str,
    parent_run_id: str,
    message: str,
) -> ChildStarted | FencedResult:
    """Inside a parent turn: create the sub-agent's session and commit its entry (one step).

    Fenced on the parent: a parent whose run was stopped or superseded creates no child
    (``{"fenced": reason}``). A parent on its run that also waits for a client call or an
    approval of the same step (``suspended_client_tool``: the step's commit registered
    them before its sub-agents start) is live.
    """
    return await _start_child(
        child_session_id,
        child_turn_id,
        agent_type,
        root_session_id,
        parent_session_id,
        parent_run_id,
        message,
    )


@exactly_once(
    names.START_CHILD_STEP, "start_child", session_param="session_id", run_param="turn_id"
)
async def _start_child(
    session_id: str,
    turn_id: str,
    agent_type: str,
    root_session_id: str,
    parent_session_id: str,
    parent_run_id: str,
    message: str,
) -> ChildStarted:
    store = current().store

    def parent_live(states: dict[str, SessionState]) -> SessionOwner:
        parent = states[parent_session_id]
        guard(parent, parent_run_id, ACTIVE_STATUSES)
        # A sub-agent belongs to whoever owns its parent.
        raise NoChange(SessionOwner(parent.principal, parent.tenant))

    _, owner = await store.update([parent_session_id], parent_live)
    await open_turn(
        store,
        session_id=session_id,
        agent_type=agent_type,
        turn_id=turn_id,
        message=message,
        root_session_id=root_session_id,
        parent_session_id=parent_session_id,
        owner=owner,
    )
    return {"sessionId": session_id}
