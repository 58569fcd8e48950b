"""The compare-and-swap of session rows (``SessionStore.update``) and the fence it checks.

Every transition of a session row is a compare-and-swap on its ``version``, guarded by what
the writer expects of the row (its run and status), in the same transaction as its effects.
A mutation reads the rows (locked on Postgres; SQLite's transaction holds the write lock),
changes them, and each is saved at the version it was read at. A guard that fails
(``Fenced``) rolls the transaction back: nothing is written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from ..core.session import SessionState
from ..errors import SessionNotFoundError
from . import unit
from .engine import bound

__all__ = ["Fenced", "NoChange", "guard", "update_once"]

T = TypeVar("T")

#: Reads the rows of ``ids`` in a transaction, held by it (``dialect.Paths.lock``).
Lock = Callable[[list[str], AsyncConnection], Awaitable[dict[str, SessionState]]]
#: Saves one state at its version (``SessionStore.save``).
Save = Callable[[SessionState, AsyncConnection], Awaitable[SessionState]]


class NoChange(Exception):  # a control-flow signal, not an error
    """Raised by an ``update`` mutation to return ``value`` without writing anything."""

    def __init__(self, value: Any) -> None:
        super().__init__("no change")
        self.value = value


class Fenced(Exception):  # a control-flow signal, not an error
    """A transition's guard failed: the row's run or status is not what the writer expected.

    Raised inside a transaction, it rolls the whole transaction back, so a stopped or
    superseded run's step writes nothing.
    """

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(f"{session_id}: {reason}")
        self.session_id = session_id
        self.reason = reason


def guard(state: SessionState, run_id: str | None, statuses: Iterable[str]) -> None:
    """The fence of a transition: the row must still be on ``run_id`` in one of ``statuses``.

    Raises:
        Fenced: the run was superseded (another run id) or stopped/ended (another status).
    """
    if state.run_id != run_id:
        raise Fenced(state.session_id, "superseded")
    if state.status not in statuses:
        raise Fenced(state.session_id, "stopped" if state.status != "idle" else "idle")


async def update_once(
    ids: list[str],
    mutate: Callable[[dict[str, SessionState]], T],
    *,
    lock: Lock,
    save: Save,
    remembered: bool = True,
) -> tuple[dict[str, SessionState], T]:
    """One attempt of ``update`` in the unit of work bound to the task: take the rows as the
    unit read them (``unit.take``; ``remembered=False``: never) or read them locked, mutate
    them, save each at the version read.

    Raises:
        SessionNotFoundError: a session does not exist.
        StaleStateError: a row changed since it was read (sent at once, or queued).
    """
    conn = bound()
    assert conn is not None, "update_once runs in a unit of work"
    taken = unit.take(ids) if remembered else None
    current = taken if taken is not None else await lock(ids, conn)
    missing = [i for i in ids if i not in current]
    if missing:
        raise SessionNotFoundError(f"No session {missing[0]!r}", sessionId=missing[0])
    before = {i: s.version for i, s in current.items()}
    try:
        value = mutate(current)
    except NoChange as unchanged:
        if taken is not None:
            # No swap would check what the earlier read decided: decide on the row as it is
            # now (``mutate`` is pure: it may run again).
            return await update_once(ids, mutate, lock=lock, save=save, remembered=False)
        return current, unchanged.value
    saved: dict[str, SessionState] = {}
    for sid in ids:
        state = current[sid]
        state.version = before[sid]
        saved[sid] = await save(state, conn)
    return saved, value
