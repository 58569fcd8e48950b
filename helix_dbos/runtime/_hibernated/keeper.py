"""The deadline keeper: hibernated batches continue when due, with no request.

A live parked turn's deadline fires inside its workflow (``DBOS.recv``'s timeout). A
hibernated turn has no workflow, so every runtime runs a keeper: every
``deadline_keeper_seconds`` it claims the hibernated sessions that are due, a page at a time
(revision 0010's index, ``store/hibernated.py``: the claim moves each row's due time to the end
of a lease, so two processes fire a batch once) and starts their continuations, whose results
commit turns each lapsed call into the ``client_tool_timeout`` result the model sees, logs
``client_tool.timeout`` and counts ``client_tool_timeout``, exactly as a live park's deadline.

The keeper also starts the continuation of a batch a submit completed when that submit's
process died between its commit and the start (the submit had made the batch due at once).
"""

from __future__ import annotations

import asyncio

from ...core.periodic import Periodic
from ...observability.log import log_event
from ...store import DueBatch, claim_due_batches, now_ms
from .._context import RuntimeContext
from .continuation import start_marked

__all__ = ["LEASE_MS", "DeadlineKeeper", "keep_once"]

LEASE_MS = 30_000
"""How long a claim holds a batch: a keeper that died before its continuation's results
commit leaves the batch due again after this."""
_PAGE = 200
_AT_ONCE = 8
"""Continuation starts in flight at once (each holds a database connection while it runs)."""


async def keep_once(ctx: RuntimeContext) -> int:
    """One pass: claim and continue every due batch whose agent this process runs; how many
    continuations it started.

    A page of due rows is claimed at once (``claim_due_batches``: on Postgres one statement,
    which skips the rows another keeper is claiming) and their continuations are started
    ``_AT_ONCE`` at a time.
    """
    started = 0
    gate = asyncio.Semaphore(_AT_ONCE)
    agents = [a.name for a in ctx.registry]

    async def one(claimed: DueBatch) -> bool:
        if claimed.run_id is None:
            return False
        async with gate:
            started = await start_marked(
                ctx,
                claimed.session_id,
                claimed.run_id,
                claimed.agent_type,
                claimed.root_session_id,
                claimed.mark,  # type: ignore[arg-type]
            )
            if started is None:
                return False
            log_event("turn.continuation_due", sessionId=claimed.session_id, runId=claimed.run_id)
            return True

    while True:
        page = await claim_due_batches(ctx.store, now_ms(), LEASE_MS, _PAGE, agents)
        done = await asyncio.gather(*(one(claimed) for claimed in page))
        started += sum(done)
        if len(page) < _PAGE:
            return started


class DeadlineKeeper(Periodic):
    """The runtime's background keeper task (``start`` at launch, ``stop`` at shutdown): a
    ``keep_once`` pass every ``interval_seconds``."""

    __slots__ = ()

    def __init__(self, ctx: RuntimeContext, interval_seconds: float) -> None:
        super().__init__(interval_seconds, lambda: keep_once(ctx), _keeper_failed)


def _keeper_failed(exc: Exception) -> None:
    log_event("turn.deadline_keeper_failed", error=type(exc).__name__)
