"""The process's runtime context: what durable code looks up by name.

DBOS is a singleton per process, and workflow and step arguments are only names and JSON, so
workflow code finds the agent registry and the store here.

It also holds ``rooms``: what a room of the runtime offers the rooms below it (a workflow to
start or feed, a hook at a turn's end). The room that defines each registers it when it is
imported; a room below calls it through ``rooms``, never by importing the room above (the
rooms' layers, pyproject.toml's import contracts). Importing ``helix_dbos.runtime`` imports
every room, so each is registered before any workflow runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config import HelixSettings
from ..core.agents import AgentRegistry
from ..store import SessionStore
from ._handover import BatchJobs, Handovers

__all__ = [
    "Hooks",
    "Rooms",
    "RuntimeContext",
    "current",
    "install",
    "rooms",
    "uninstall",
    "workflow_task",
]

Door = Callable[..., Awaitable[Any]]


def _unregistered(name: str) -> Door:
    async def missing(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError(f"rooms.{name} is not registered: import helix_dbos.runtime first")

    return missing


class Hooks(Protocol):
    """What a commit reads of the runtime's notification hooks
    (``notifications.hooks.Notifications``)."""

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds of event some hook wants."""
        ...

    def wake(self) -> None:
        """Look for due events now."""
        ...


class Rooms:
    """What the rooms above offer the rooms below, each registered by the module that
    defines it (the one door between two rooms that may not import each other)."""

    def __init__(self) -> None:
        self.after_turn: Door = _unregistered("after_turn")
        """``companions.wake_parent.after_turn(session_id, agent_type, outcome)``: at a turn's
        end, in its workflow (a turn, a continuation, a persistent session's inbox)."""
        self.run_companion_tool: Door = _unregistered("run_companion_tool")
        """``companions.sends.run_companion_tool(...)``: a companion tool of a turn's batch."""
        self.serve_inbox: Door = _unregistered("serve_inbox")
        """``companions.persistent.serve_inbox(turn, run_id)``: a continued persistent turn goes
        back to serving its inbox."""
        self.deliver: Door = _unregistered("deliver")
        """``companions.persistent.deliver(ctx, session_id, agent_type, message, run_id)``: a
        message to a persistent session."""
        self.stop_tree: Door = _unregistered("stop_tree")
        """``operations.control.stop_tree(ctx, session_id, abort=..., reason=...)``: stop a
        session and its sub-agents."""


rooms = Rooms()
"""The process's one ``Rooms``."""


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
    (``_turn/batch_job.py``)."""
    messenger: Any = None
    """What sends wake-ups and cancels workflows: ``None`` is DBOS itself (a launched runtime);
    a process that runs no turns (the CLI) passes a ``dbos.DBOSClient``."""
    workflows: set[asyncio.Task[Any]] = field(default_factory=set)
    """The tasks of this runtime's workflows running in this process right now, parked ones
    included (``workflow_task``): a shutdown cancels those still running."""
    fleet: Any = None
    """The runtime's ``Fleet``, when it runs one: a companion's send adopts the companion's
    workflow at once when its process is gone (as a message to a persistent session does)."""
    notes: Hooks | None = None
    """The runtime's notification hooks (``_notifications/hooks.py``): which events of parked calls
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
