"""A turn this process starts takes its first model step's inputs from its entry.

``AgentRuntime.start`` commits a new session's entry (the session's row and the user's
message) and starts the turn's workflow at the same time, not one after the other. A
follow-up message's entry (the claim of an idle session) commits first, and the workflow
starts after it: a refused claim must leave no workflow. Either way, once the entry has
committed, the turn's first model step starts at once from the session and the conversation
as the entry committed them (nothing is read back; its commit swaps from that row,
``SessionStore.read_earlier``), while DBOS is still registering the workflow. The turn takes that running
step here and awaits it as its own first step: the step is the same exactly-once commit under
the same checkpoint slot, whichever task runs it. A turn that finds nothing here (recovered,
started by the reconciler, or by another process) runs its first step itself, reading its
inputs as usual; so does one whose process died before the step committed.

If the entry fails (the session is busy, the database refused it), the turn learns it here
and ends at once, writing nothing.

The same holds between a woken turn's results commit and its next model step
(``Resumption``): the turn reads its rows and its conversation once, when it wakes; the
results commit swaps from those rows, and hands the next model step the row it committed and
the conversation with the results appended. The next step reads nothing back.

A batch's continuation (``_turn/batch_job.py``) is handed over the same way: a turn parked on a
batch of client calls publishes it here (``ParkedBatch``, a value), the submit that completes
it starts the batch's job from that value while DBOS hands the turn its wake-up
(``BatchJobs.start``), and the woken turn joins that job by its checkpoint slot instead of
running a second one (``BatchJobs.run``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from ..core.messages import Message
from ..core.session import SessionState
from . import names
from ._triage import SUSPENDING_KINDS
from .records import CommittedResults, FencedResult, PlanItem, ToolResult, TurnSummary

__all__ = [
    "BatchJobs",
    "Continued",
    "EntryInputs",
    "FirstStep",
    "Handovers",
    "ParkedBatch",
    "ReadLost",
    "ResumeRead",
    "Resumption",
    "detached",
    "drop",
]

T = TypeVar("T")

ResumeRead = tuple[dict[str, SessionState], list[Message]]
"""What a woken turn reads (``SessionStore.resume_inputs``): its rows and its conversation."""


@dataclass(frozen=True, slots=True)
class EntryInputs:
    """A committed entry: the session's row and its live conversation, as committed."""

    state: SessionState
    history: list[Message]


def detached(work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Start ``work`` for a turn that may never take it: an error nobody retrieves is not
    logged as one (the turn that takes the task meets the error itself)."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    return task


FirstStep = asyncio.Task[Any]
"""A turn's first model step, started as its entry committed: it returns what the
turn's own first step would (``steps.model_answer``)."""


class Handovers:
    """The entries this process is committing, by the workflow id of the turn each starts."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[FirstStep | EntryInputs | None]] = {}

    def open(self, workflow_id: str) -> asyncio.Future[FirstStep | EntryInputs | None]:
        """A handover for the turn ``workflow_id`` (before its workflow starts); settle it
        with the first step once the entry committed and the step started (or the entry's
        inputs, for a turn that runs its steps itself), or ``None`` if the entry failed."""
        waiter = self._waiting[workflow_id] = asyncio.get_running_loop().create_future()
        return waiter

    def close(self, workflow_id: str) -> None:
        """Forget the handover of ``workflow_id`` if its turn never took it, and stop the
        first step it handed over (the turn, wherever it runs, runs that step itself)."""
        waiter = self._waiting.pop(workflow_id, None)
        if waiter is not None and waiter.done() and not waiter.cancelled():
            step = waiter.result()
            if isinstance(step, asyncio.Task):
                step.cancel()

    def close_all(self) -> None:
        """``close`` every handover not taken (at shutdown)."""
        for workflow_id in list(self._waiting):
            self.close(workflow_id)

    async def take(self, workflow_id: str) -> FirstStep | EntryInputs | None | bool:
        """What the entry of ``workflow_id`` handed over (once): its first step (or inputs),
        ``None`` if the entry failed, or ``False`` if this process is not committing one for
        it."""
        waiter = self._waiting.pop(workflow_id, None)
        if waiter is None:
            return False
        return await waiter


class Resumption:
    """What a woken turn read (its rows and conversation), for its results commit, and what
    that commit hands over to the next model step.

    The commit swaps from the rows (``read``: handed over once). When its swap landed on the owner's row as
    read (no other write came in between, so the conversation read with it is still the
    whole conversation), it ``offer``s the row it committed and the conversation with its
    messages appended. The turn ``take``s them only for the result the commit returned: a
    commit that returned a recorded result (a replay, a duplicate execution) or ran again on
    a changed row hands over nothing, and the next step reads its inputs itself.
    """

    __slots__ = ("_history", "_inputs", "_read", "_read_version", "_result", "_session_id")

    def __init__(self, session_id: str, states: dict[str, SessionState], history: list[Message]):
        self._session_id = session_id
        self._read_version = states[session_id].version
        self._history = history
        self._result: Any = None
        self._inputs: EntryInputs | None = None
        self._read = list(states.values())

    def read(self) -> list[SessionState]:
        """The rows as read, for the commit to swap from (once: a commit run again reads
        them itself, since the first run may have changed them in place)."""
        rows, self._read = self._read, []
        return rows

    def offer(self, result: Any, saved: SessionState, appended: list[Message]) -> None:
        """The commit that returns ``result`` saved the owner's row as ``saved``, appending
        ``appended`` to its conversation."""
        if saved.version != self._read_version + 1:
            self._result, self._inputs = None, None  # swapped from a row read again
            return
        self._result = result
        self._inputs = EntryInputs(saved, [*self._history, *appended])

    def take(self, result: Any) -> EntryInputs | None:
        """The next step's inputs, if the commit returned ``result`` from the attempt that
        offered them (once)."""
        inputs, self._inputs, self._history = self._inputs, None, []
        return inputs if result is self._result and inputs is not None else None


@dataclass(frozen=True, slots=True)
class ParkedBatch:
    """A turn's batch as it stopped: everything its continuation needs but the session's
    row and conversation, which it reads as recorded."""

    workflow_id: str
    """The workflow whose checkpoint slots the turn's commits use (the first one's, for a
    turn taken up after it hibernated)."""
    live_workflow_id: str
    """The workflow running the turn now: the session's row names it, and submits find the
    published batch by it."""
    session_id: str
    root_session_id: str
    agent_type: str
    run_id: str
    step: int
    plan: list[PlanItem]
    results: dict[str, ToolResult]
    """The results known before the park (server tools, sub-agents, resolved approvals)."""
    summary: TurnSummary
    rebind: str | None = None
    """The continuation workflow of a hibernated turn: its results commit names it on the row."""

    @property
    def slot(self) -> str:
        """The checkpoint slot of the batch's results commit: the job's identity."""
        return names.turn_slot(self.workflow_id, self.run_id, self.step, "results")

    @property
    def suspended(self) -> bool:
        """Whether calls of the batch waited (the results commit then opens the next run)."""
        return any(item["kind"] in SUSPENDING_KINDS for item in self.plan)


@dataclass(frozen=True, slots=True)
class Continued:
    """What the job did: the results commit's result, and the next model step, started from
    what that commit wrote (``None`` when the turn does not go on to one: fenced, finished
    by a tool, or out of steps)."""

    settled: CommittedResults | FencedResult
    next_step: FirstStep | None


class ReadLost(Exception):
    """The job's read of the session's row and conversation failed before it wrote anything:
    whoever joins it runs the job again, reading itself."""


def drop(job: asyncio.Task[Continued] | None) -> None:
    """Let go of a job nobody will join. A job still running is left to finish: cancelled
    mid-transaction, it could leave its connection holding a lock (SQLite) or its commit
    half-way through its retries. The next model step it started is stopped once it is
    known; the turn, wherever it runs, runs that step itself."""
    if job is None:
        return
    if job.done():
        _stop_next_step(job)
    else:
        job.add_done_callback(_stop_next_step)


def _stop_next_step(job: asyncio.Task[Continued]) -> None:
    if not job.cancelled() and job.exception() is None:
        step = job.result().next_step
        if step is not None:
            step.cancel()


class BatchJobs:
    """This process's published batches and the jobs submits started for them, by the
    workflow id of the parked turn."""

    __slots__ = ("_jobs", "_published", "_running")

    def __init__(self) -> None:
        self._published: dict[str, ParkedBatch] = {}
        self._jobs: dict[str, tuple[str, asyncio.Task[Continued]]] = {}
        self._running: set[asyncio.Task[Continued]] = set()
        """Every job started here and not finished, joined or not (``close_all`` waits)."""

    def publish(self, batch: ParkedBatch) -> None:
        """``batch``'s turn parks on it, and the submit completing it may continue it."""
        self._published[batch.live_workflow_id] = batch

    def withdraw(self, live_workflow_id: str) -> None:
        """The turn left its park: a later submit starts nothing for it (a job already
        started stays, for the turn to join)."""
        self._published.pop(live_workflow_id, None)

    def start(
        self, live_workflow_id: str, job_of: Callable[[ParkedBatch], Coroutine[Any, Any, Continued]]
    ) -> bool:
        """Start the job of the batch ``live_workflow_id`` parked on (``job_of`` it), if it
        published one; whether one started. Called by the submit that completed the batch."""
        batch = self._published.pop(live_workflow_id, None)
        if batch is None:
            return False
        job = detached(job_of(batch))
        self._running.add(job)
        job.add_done_callback(self._running.discard)
        self._forget_job(live_workflow_id)
        self._jobs[live_workflow_id] = (batch.slot, job)
        return True

    async def run(
        self, batch: ParkedBatch, job_of: Callable[[ParkedBatch], Coroutine[Any, Any, Continued]]
    ) -> Continued:
        """The job of ``batch``, for its turn: the one a submit started for it here, joined,
        or else run now. A job whose read failed (or that was cancelled at shutdown) wrote
        nothing, and is run again."""
        started = self._jobs.pop(batch.live_workflow_id, None)
        if started is not None:
            slot, job = started
            if slot == batch.slot:
                try:
                    return await asyncio.shield(job)
                except asyncio.CancelledError:
                    if not job.cancelled():
                        drop(job)
                        raise  # the turn itself is being cancelled
                except ReadLost:
                    pass
            else:
                drop(job)
        return await job_of(batch)

    def forget(self, live_workflow_id: str) -> None:
        """The turn ``live_workflow_id`` ended: drop what it left here."""
        self._published.pop(live_workflow_id, None)
        self._forget_job(live_workflow_id)

    def _forget_job(self, live_workflow_id: str) -> None:
        started = self._jobs.pop(live_workflow_id, None)
        if started is not None:
            drop(started[1])

    async def close_all(self, timeout: float) -> None:
        """Let go of the jobs no turn joined, and wait up to ``timeout`` seconds for every job
        started here to finish (at shutdown, before the store closes); one stuck on a dead
        database is cancelled."""
        self._published.clear()
        for live_workflow_id in list(self._jobs):
            self._forget_job(live_workflow_id)
        running = list(self._running)
        if not running:
            return
        _, stuck = await asyncio.wait(running, timeout=timeout)
        for job in stuck:
            job.cancel()
