"""Where a stream of a session's events starts, shared by the AI SDK chat and AG-UI endpoints.

A request that starts a turn or answers calls streams what the session appends after it:
``last_sequence`` is the point to follow from, read before the request changes anything. A
client that reconnects to a running turn gets the turn's current run from its first event:
``run_start``.
"""

from __future__ import annotations

from ..runtime import AgentRuntime

__all__ = ["last_sequence", "run_start"]

#: Events read per page while searching.
_PAGE = 1000


async def last_sequence(runtime: AgentRuntime, session_id: str) -> int:
    """The sequence of the session's last event (0 when it has none)."""
    after = 0
    while True:
        batch = await runtime.events(session_id, after, _PAGE)
        if batch:
            after = batch[-1].sequence
        if len(batch) < _PAGE:
            return after


async def run_start(runtime: AgentRuntime, session_id: str, run_id: str | None) -> int:
    """The sequence just before the first event of ``run_id`` (0 when none is found)."""
    after = 0
    while True:
        batch = await runtime.events(session_id, after, _PAGE)
        for item in batch:
            if item.run_id == run_id:
                return item.sequence - 1
        if len(batch) < _PAGE:
            return 0
        after = batch[-1].sequence
