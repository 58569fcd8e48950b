"""The continuation of a hibernated turn: one workflow, started from what the row records.

A hibernated turn (``_turn/hibernation.py``) has no workflow. When its batch is complete (a submit
answered its last call), abandoned (a new message), or due (its deadlines lapsed, found by the
deadline keeper), ``start_continuation`` starts ``helix.turn.continue`` under an id derived
from the session and the batch's run (``names.continuation_workflow_id``): two submits, two
processes, a retried request, the keeper and the reconciler all start the same workflow, and
DBOS runs it once.

The workflow takes the turn up where it hibernated: the batch's results commit (the answers,
lapsed calls as ``client_tool_timeout`` results, an abandon's ``client_tool_abandoned``), then
the next model steps, exactly as the parked workflow would have, under the same checkpoint
slots (the first workflow's, recorded in the mark), so a commit that already landed is taken
as recorded. Its results commit names the continuation on the session's row (the next batch's
wake-ups go to it) and removes the mark. Its contract version is the process's that runs it.

A turn that hibernated waiting on its sub-agent (``HibernationMark.child``) is continued the
same way, under ``names.continuation_workflow_id(session, run, child)``, once the sub-agent's
turn ended (``hibernation.child_ended``): it takes the sub-agent's outcome as the call's
result and runs the rest of the step. A sub-agent's continuation that ends its turn reports the
end to its parent, and starts the parent's continuation when that makes it due.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from dbos import DBOS, SetWorkflowID
from dbos import error as dbos_error

from ...core.session import SessionState
from ...observability.log import log_event
from ...store import patience
from .. import names
from .._commits.once import recorded
from .._context import RuntimeContext, current, rooms, workflow_task
from .._handover import ResumeRead
from .._turn.hibernation import child_ended, mark_of, waits_on_child
from .._turn.outcomes import stopped_outcome
from .._turn.workflow import _Turn
from ..records import HibernationMark, HibernationRecord, TurnOutcome

__all__ = [
    "continuation_of",
    "follow",
    "run_continuation",
    "start_continuation",
    "start_marked",
]


@DBOS.workflow(name=names.CONTINUE_WORKFLOW)
async def run_continuation(
    session_id: str,
    run_id: str,
    agent_type: str,
    root_session_id: str,
    slot_workflow_id: str,
    step: int,
    child: str | None = None,
) -> dict[str, Any]:
    """Continue the turn of ``session_id`` hibernated on ``run_id``'s batch of model step
    ``step`` (or waiting on the sub-agent of its call ``child``), whose commits use the
    checkpoint slots of ``slot_workflow_id``.

    Returns the turn's outcome; for a persistent session, whose continuation goes on to
    serve its inbox, the persistent workflow's (the turn's is published under ``run_id``).
    """
    with patience(None), workflow_task():
        turn = _ContinuedTurn(session_id, run_id, agent_type, root_session_id, names.TURN_LAYOUT)
        turn.workflow_id = slot_workflow_id
        turn.handed.rebind = DBOS.workflow_id
        if not await turn.take_up(step, child):
            # Nothing hibernated on this batch (an id nobody should have started).
            return dict(stopped_outcome(run_id))
        if turn.agent.persistent:
            served: dict[str, Any] = await rooms.serve_inbox(turn, run_id)
            return served
        outcome = await turn.run()
        if session_id != root_session_id and outcome["outcome"] != "hibernated":
            await _report_end(session_id, outcome)
        await rooms.after_turn(session_id, agent_type, outcome)  # companion replies kept meanwhile
        return dict(outcome)


@DBOS.step(name=names.CHILD_ENDED_STEP)
async def _child_ended_step(session_id: str, outcome: TurnOutcome) -> dict[str, Any] | None:
    """Report a sub-agent's end to its parent's row; the parent's row if that made it due."""
    state = await current().store.load(session_id)
    if state is None or state.parent_session_id is None:
        return None
    with patience(None):
        parent = await child_ended(state, outcome)
    return None if parent is None else parent.model_dump(mode="json")


async def _report_end(session_id: str, outcome: TurnOutcome) -> None:
    """The sub-agent ``session_id``'s turn ended in this continuation: tell its parent (a
    recorded step), and start the parent's continuation if it was waiting on it."""
    parent = await _child_ended_step(session_id, outcome)
    if parent is not None:
        await start_continuation(current(), SessionState.model_validate(parent))


class _ContinuedTurn(_Turn):
    """A turn taken up from its hibernation record instead of from its entry."""

    __slots__ = ("_taken_read",)

    async def take_up(self, step: int, child: str | None = None) -> bool:
        """Set the turn to settle the batch of ``step`` first (or to take the end of the
        sub-agent of ``child`` and run the rest of the step), from its hibernation record;
        ``False`` if no such hibernation was recorded.

        A batch of calls is settled first: its record is read with the session's rows and
        conversation, which the batch's results commit swaps from (one read, not two)."""
        slot = names.hibernate_slot(self.workflow_id, self.run_id, step, child)
        with_rows = (self.session_id, self.root_session_id) if child is None else None
        record, self._taken_read = await _record(slot, with_rows)
        if record is None or not record.get("hibernated"):
            self._taken_read = None
            return False
        self.summary = record["summary"]
        self.handed.taken_up = (step, record["plan"], record["results"], child)
        return True

    def _prior_read(self) -> ResumeRead | None:
        """The rows and conversation read with the record, for the first batch only."""
        read, self._taken_read = getattr(self, "_taken_read", None), None
        return read


async def _record(
    slot: str, with_rows: tuple[str, str] | None = None
) -> tuple[HibernationRecord | None, ResumeRead | None]:
    """The hibernate commit's record under ``slot``, if it committed; ``with_rows`` (the
    session and its root): read with their rows and the session's conversation, in one read
    (``None`` for those when the session's row is missing)."""
    if with_rows is None:
        done = await recorded(slot)
        return (None if done is None else done["state"]["result"]), None
    session_id, root_session_id = with_rows
    state, read = await current().store.resume_recorded(session_id, [root_session_id], slot)
    return (None if state is None else state["result"]), read


async def start_continuation(ctx: RuntimeContext, state: SessionState) -> str | None:
    """Start the continuation of ``state``'s hibernated turn (idempotent: its id is derived
    from the row); the workflow id, or ``None`` if the session is not hibernated or its agent
    is not registered here (another process, which has it, starts it)."""
    mark = mark_of(state)
    if mark is None or state.run_id is None:
        return None
    return await start_marked(
        ctx, state.session_id, state.run_id, state.agent_type, state.root_session_id, mark
    )


async def start_marked(
    ctx: RuntimeContext,
    session_id: str,
    run_id: str,
    agent_type: str,
    root_session_id: str,
    mark: HibernationMark,
) -> str | None:
    """``start_continuation`` from what it needs of the row: the session, its run, agent and
    root, and its hibernation ``mark`` (the deadline keeper's claim returns just these)."""
    if agent_type not in ctx.registry:
        return None
    if waits_on_child(mark):
        return None  # it goes on once its sub-agent ends (``hibernation.child_ended``)
    workflow_id = names.continuation_workflow_id(session_id, run_id, mark.get("child"))
    try:
        with SetWorkflowID(workflow_id):
            handle = await DBOS.start_workflow_async(
                run_continuation,
                session_id,
                run_id,
                agent_type,
                root_session_id,
                mark["workflowId"],
                int(mark["step"]),
                mark.get("child"),
            )
    except Exception as exc:
        # The mark stays: the deadline keeper (or the reconciler) starts it again.
        log_event(
            "turn.continuation_start_failed",
            sessionId=session_id,
            runId=run_id,
            workflowId=workflow_id,
            error=f"{type(exc).__name__}: {exc}",
        )
        return None
    _started_here[workflow_id] = handle
    while len(_started_here) > _STARTED_HERE_KEPT:
        _started_here.popitem(last=False)
    return workflow_id


_started_here: OrderedDict[str, Any] = OrderedDict()
"""The in-process handles of the continuations this process started, newest last: a handle
that follows a turn here awaits the workflow's task instead of polling the database."""
_STARTED_HERE_KEPT = 4096


async def follow(session_id: str, outcome: Any, poll_seconds: float = 0.25) -> Any:
    """A turn's final outcome from the outcome of one of its workflows: a turn that
    hibernated is followed into its continuation (which starts only when the batch is
    complete or due, so this polls for it every ``poll_seconds``), and so on. A hibernated
    turn that was stopped before any continuation started ends ``stopped``."""
    while isinstance(outcome, dict) and outcome.get("outcome") == "hibernated":
        run_id = str(outcome["runId"])
        handle = await continuation_of(session_id, run_id, poll_seconds, outcome.get("continueAs"))
        if handle is None:
            return stopped_outcome(run_id)
        outcome = await handle.get_result(polling_interval_sec=poll_seconds)
    return outcome


async def continuation_of(
    session_id: str, run_id: str, poll_seconds: float = 0.25, workflow_id: str | None = None
) -> Any | None:
    """The continuation workflow of ``run_id``'s hibernated batch (``workflow_id``, when the
    turn waited on a sub-agent) once it exists, or ``None`` once the session no longer waits
    on that batch without one (a stop removed the mark)."""
    workflow_id = workflow_id or names.continuation_workflow_id(session_id, run_id)
    local = _started_here.get(workflow_id)
    if local is not None:
        return local
    while True:
        for check in range(2):
            try:
                return await DBOS.retrieve_workflow_async(workflow_id)
            except dbos_error.DBOSNonExistentWorkflowError:
                pass
            if check == 1:
                # Still none after the row said nothing waits: none will start.
                return None
            state = await current().store.load(session_id)
            if state is not None and state.run_id == run_id and mark_of(state) is not None:
                break  # still hibernated on this batch: wait for its continuation
            # The mark is gone: either a continuation removed it (it exists by now; the
            # second look finds it) or a stop did.
        await asyncio.sleep(poll_seconds)
