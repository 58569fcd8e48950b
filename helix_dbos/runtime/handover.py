"""A turn this process starts takes its first model step's inputs from its entry.

``AgentRuntime.start`` commits a new session's entry (the claim and the user's message) and
starts the turn's workflow at the same time, not one after the other. The turn waits here for
the entry to commit and takes the session and the conversation as the entry committed them,
instead of reading them back: the first model step starts from them (its commit then swaps
from that row, ``store.Prior``). A turn that finds nothing here (recovered, started by the
reconciler, or by another process) reads its inputs as usual.

If the entry fails (the session is busy, the database refused it), the turn learns it here
and ends at once, writing nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..core.messages import Message
from ..core.session import SessionState

__all__ = ["EntryInputs", "Handovers"]


@dataclass(frozen=True, slots=True)
class EntryInputs:
    """A committed entry: the session's row and its live conversation, as committed."""

    state: SessionState
    history: list[Message]


class Handovers:
    """The entries this process is committing, by the workflow id of the turn each starts."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[EntryInputs | None]] = {}

    def open(self, workflow_id: str) -> asyncio.Future[EntryInputs | None]:
        """A handover for the turn ``workflow_id`` (before its workflow starts); settle it
        with ``EntryInputs`` once the entry committed, or ``None`` if it failed."""
        waiter = self._waiting[workflow_id] = asyncio.get_running_loop().create_future()
        return waiter

    def close(self, workflow_id: str) -> None:
        """Forget the handover of ``workflow_id`` if its turn never took it."""
        self._waiting.pop(workflow_id, None)

    async def take(self, workflow_id: str) -> EntryInputs | None | bool:
        """What the entry of ``workflow_id`` handed over (once): its inputs, ``None`` if the
        entry failed, or ``False`` if this process is not committing one for it."""
        waiter = self._waiting.pop(workflow_id, None)
        if waiter is None:
            return False
        return await waiter
