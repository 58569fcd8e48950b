"""Exactly-once steps: a step's session writes commit with a checkpoint of its result.

The writes of a step commit in ONE transaction with a checkpoint row (``__agents_checkpoints``)
keyed by the step's slot in its workflow (``<workflow id>:<step id>:<kind>``) that holds the
step's result; DBOS then records the step as usual. A re-execution (a crash after our commit,
before DBOS recorded the step) finds the checkpoint and returns the same result without writing
again; a concurrent duplicate loses on the checkpoint's primary key and reads the winner's
result.

This is what DBOS's datasource transactions do, in fewer round trips: no separate ownership
check and no checkpoint clean-up transaction per step, and the model call and the commit of its
answer can be one step.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

from dbos import DBOS
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from .context import current

__all__ = ["commit_once", "exactly_once", "marker", "recorded", "step_connection"]

R = TypeVar("R")
P = ParamSpec("P")

_step_tx: ContextVar[AsyncConnection | None] = ContextVar("helix_step_tx", default=None)


async def step_connection() -> AsyncConnection:
    """The transaction of the exactly-once step being committed."""
    conn = _step_tx.get()
    assert conn is not None, "only inside an exactly-once step commit"
    return conn


def marker(kind: str) -> str:
    """The checkpoint id of this step's writes: its slot in its workflow (replay-stable)."""
    return f"{DBOS.workflow_id}:{DBOS.step_id}:{kind}"


async def recorded(slot: str) -> dict[str, Any] | None:
    """The checkpoint of an earlier execution of this step, if its writes committed."""
    return await current().store.get_checkpoint(slot)


async def commit_once(
    slot: str,
    session_id: str,
    run_id: str | None,
    step_count: int,
    body: Callable[[], Awaitable[R]],
) -> R:
    """Run ``body``'s writes and the checkpoint holding its result in one transaction."""
    store = current().store
    try:
        async with store.transaction() as conn:
            token = _step_tx.set(conn)
            try:
                result = await body()
            finally:
                _step_tx.reset(token)
            await store.write_checkpoint(
                session_id,
                run_id,
                step_count=step_count,
                state={"result": result},
                checkpoint_id=slot,
                conn=conn,
            )
    except IntegrityError:
        # A concurrent execution of the same step committed first: its result is ours.
        done = await recorded(slot)
        if done is None:
            raise
        return done["state"]["result"]  # type: ignore[no-any-return]
    return result


def exactly_once(
    name: str, kind: str, run_arg: int
) -> Callable[[Callable[P, Coroutine[Any, Any, R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Make ``fn`` a DBOS step named ``name`` whose writes commit exactly once.

    ``fn``'s first argument is the session id, and ``run_arg`` the position of the run id.
    """

    def wrap(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        @functools.wraps(fn)
        async def run(*args: P.args, **kwargs: P.kwargs) -> R:
            # No read before the write: a re-execution's writes fail on the checkpoint's key
            # (or on a unique index) and roll back, and the recorded result is returned.
            slot = marker(kind)
            return await commit_once(
                slot, str(args[0]), str(args[run_arg]), 0, lambda: fn(*args, **kwargs)
            )

        return DBOS.step(name=name)(run)

    return wrap
