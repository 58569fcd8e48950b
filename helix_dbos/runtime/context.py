"""The process's runtime context: what durable code looks up by name.

DBOS is a singleton per process, and workflow and step arguments are only names and JSON, so
workflow code finds the agent registry and the store here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import HelixSettings
from ..core.agents import AgentRegistry
from ..store.store import SessionStore
from .handover import BatchJobs, Handovers

if TYPE_CHECKING:
    from .notifications.hooks import Notifications

__all__ = ["RuntimeContext", "current", "install", "uninstall", "workflow_task"]


@dataclass
class RuntimeContext:
    """Everything durable code needs, installed when a runtime launches."""

    settings: HelixSettings
    registry: AgentRegistry
    store: SessionStore
    scrubber: object | None = None
    parked: set[str] = field(default_factory=set)
    """Workflow ids whose coroutine is parked in ``recv`` right now (for interrupt checks)."""
    client: Any = None
    """A lazy ``dbos.DBOSClient`` on the system database, used only to enlist wake-up messages
    in our own store transactions (``send_in_transaction``)."""
    handovers: Handovers = field(default_factory=Handovers)
    """Entries being committed, for the turns they start (``handover.py``)."""
    batch_jobs: BatchJobs = field(default_factory=BatchJobs)
    """Batches of client calls parked here, and the jobs submits started for them
    (``batch_job.py``)."""
    messenger: Any = None
    """What sends wake-ups and cancels workflows: ``None`` is DBOS itself (a launched runtime);
    a process that runs no turns (the CLI) passes a ``dbos.DBOSClient``."""
    workflows: set[asyncio.Task[Any]] = field(default_factory=set)
    """The tasks of this runtime's workflows running in this process right now, parked ones
    included (``workflow_task``): a shutdown cancels those still running."""
    fleet: Any = None
    """The runtime's ``Fleet``, when it runs one: a companion's send adopts the companion's
    workflow at once when its process is gone (as a message to a persistent session does)."""
    notes: Notifications | None = None
    """The runtime's notification hooks (``notifications.py``): which events of parked calls
    the commits write to the outbox."""

    def dbos(self) -> Any:
        """DBOS, or this context's messenger: ``send_async`` and ``cancel_workflow_async``."""
        if self.messenger is not None:
            return self.messenger
        from dbos import DBOS

        return DBOS


_context: RuntimeContext | None = None


def install(context: RuntimeContext) -> None:
    """Make ``context`` the process's runtime context."""
    global _context
    _context = context


def uninstall() -> None:
    """Forget the runtime context (at shutdown)."""
    global _context
    _context = None


def current() -> RuntimeContext:
    """The launched runtime's context.

    Raises:
        RuntimeError: no runtime is launched in this process.
    """
    if _context is None:
        raise RuntimeError("No helix-dbos runtime is launched in this process")
    return _context


class _WorkflowTask:
    # A plain class, not a generator context manager: every parked turn holds one open, and
    # a generator's frame cost about 440 bytes per parked turn more.
    __slots__ = ("_task", "_tasks")

    def __enter__(self) -> None:
        self._task = asyncio.current_task()
        self._tasks = current().workflows
        if self._task is not None:
            self._tasks.add(self._task)

    def __exit__(self, *_exc: object) -> None:
        if self._task is not None:
            self._tasks.discard(self._task)


def workflow_task() -> _WorkflowTask:
    """Within a workflow's body: its task counts as the launched runtime's until the body ends.

    A shutdown cancels the tasks still counted (``AgentRuntime.shutdown``). A cancelled
    workflow records nothing: it stays ``PENDING`` in DBOS and recovers where it was.
    """
    return _WorkflowTask()
