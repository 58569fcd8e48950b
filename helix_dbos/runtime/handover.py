"""A turn this process starts takes its first model step's inputs from its entry.

``AgentRuntime.start`` commits a new session's entry (the session's row and the user's
message) and starts the turn's workflow at the same time, not one after the other. A
follow-up message's entry (the claim of an idle session) commits first, and the workflow
starts after it: a refused claim must leave no workflow. Either way, once the entry has
committed, the turn's first model step starts at once from the session and the conversation
as the entry committed them (nothing is read back; its commit swaps from that row,
``store.Prior``), while DBOS is still registering the workflow. The turn takes that running
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

A submit that completes the batch of a turn parked in this process starts that read itself,
as it wakes the turn (``Prefetches``): it then runs while DBOS consumes the wake-up message,
not after it. For a batch of client calls (no approval among them), the submit goes on from
that read to the turn's results commit and starts its next model step (``Early``): the turn,
once DBOS hands it the wake-up, takes the recorded results and the running step. Both are
the turn's own exactly-once commits under their checkpoint slots, whichever task runs them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..core.messages import Message
from ..core.session import SessionState
from ..store.store import Prior

__all__ = [
    "Early",
    "EntryInputs",
    "FirstStep",
    "Handovers",
    "Prefetches",
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


@dataclass(frozen=True, slots=True)
class Early:
    """What a submit did for a parked turn whose batch it completed: the results commit's
    result, and the turn's next model step, started from what that commit wrote (``None``
    when the turn does not go on to one: fenced, finished by a tool, or out of steps). Or
    the error that commit raised (``failure``): the turn fails with it, as if it had run the
    commit itself, rather than spend a second round of retries on it."""

    settled: Any
    next_step: FirstStep | None
    failure: Exception | None = None


class EarlyStart(Protocol):
    """A parked turn that can be continued by the submit that completes its batch."""

    def continue_early(
        self, read: Coroutine[Any, Any, ResumeRead]
    ) -> Coroutine[Any, Any, Early]: ...


def drop(task: asyncio.Task[Any] | None) -> None:
    """Let go of work started for a turn that will not take it. Work still running is left
    to finish: cancelled mid-transaction, it could leave its connection holding a lock
    (SQLite) or its commit half-way through its retries. The next model step it started
    (``Early``) is stopped once it is known; the turn, wherever it runs, runs that step
    itself."""
    if task is None:
        return
    if task.done():
        _stop_next_step(task)
    else:
        task.add_done_callback(_stop_next_step)


def _stop_next_step(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is None:
        done = task.result()
        if isinstance(done, Early) and done.next_step is not None:
            done.next_step.cancel()


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

    The commit swaps from the rows (``prior``). When its swap landed on the owner's row as
    read (no other write came in between, so the conversation read with it is still the
    whole conversation), it ``offer``s the row it committed and the conversation with its
    messages appended. The turn ``take``s them only for the result the commit returned: a
    commit that returned a recorded result (a replay, a duplicate execution) or ran again on
    a changed row hands over nothing, and the next step reads its inputs itself.
    """

    __slots__ = ("_history", "_inputs", "_read_version", "_result", "_session_id", "prior")

    def __init__(self, session_id: str, states: dict[str, SessionState], history: list[Message]):
        self._session_id = session_id
        self._read_version = states[session_id].version
        self._history = history
        self._result: Any = None
        self._inputs: EntryInputs | None = None
        self.prior = Prior(*states.values())

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


class Prefetches:
    """Work for woken turns started early, by the workflow id of the turn: the read of its
    inputs, or the read, its results commit and its next step (``Early``).

    The turn takes it (once) when it leaves its park. It checks a read like any read of its
    own: its results commit swaps from the rows, so a read that went stale in between costs a
    second read, never a wrong write. An early results commit is the turn's own (same slot):
    the turn finds it recorded, whoever ran it.
    """

    __slots__ = ("_parked", "_reads", "_running")

    def __init__(self) -> None:
        self._reads: dict[str, asyncio.Task[Any]] = {}
        self._parked: dict[str, EarlyStart] = {}
        self._running: set[asyncio.Task[Any]] = set()
        """Every task started here and not finished, taken or not (``close_all`` waits)."""

    def park(self, workflow_id: str, turn: EarlyStart) -> None:
        """``turn`` is parked on a batch its submit may continue (``EarlyStart``)."""
        self._parked[workflow_id] = turn

    def start(self, workflow_id: str, read: Coroutine[Any, Any, ResumeRead]) -> None:
        """Start ``read`` for the turn ``workflow_id`` (replacing an earlier one), and go on
        to its results commit and next step if it parked on a batch that allows it."""
        turn = self._parked.pop(workflow_id, None)
        # Nobody takes it if the turn was cancelled.
        task = detached(turn.continue_early(read) if turn is not None else read)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        drop(self._reads.pop(workflow_id, None))
        self._reads[workflow_id] = task

    def take(self, workflow_id: str) -> asyncio.Task[Any] | None:
        """The work started for ``workflow_id``, if any (once): a ``ResumeRead`` or an
        ``Early``."""
        self._parked.pop(workflow_id, None)
        return self._reads.pop(workflow_id, None)

    async def close_all(self, timeout: float) -> None:
        """Let go of the work no turn took, and wait up to ``timeout`` seconds for every
        task started here to finish (at shutdown, before the store closes); one stuck on
        a dead database is cancelled."""
        self._parked.clear()
        for workflow_id in list(self._reads):
            drop(self._reads.pop(workflow_id))
        running = list(self._running)
        if not running:
            return
        _, stuck = await asyncio.wait(running, timeout=timeout)
        for task in stuck:
            task.cancel()
