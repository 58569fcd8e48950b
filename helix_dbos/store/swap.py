"""The compare-and-swap of session rows (``SessionStore.update``) and the fence it checks.

Every transition of a session row is a compare-and-swap on its ``version``, guarded by what
the writer expects of the row (its run and status), in the same transaction as its effects.
A mutation reads the rows (locked on Postgres; SQLite's transaction holds the write lock),
changes them, and each is saved at the version it was read at. A guard that fails
(``Fenced``) rolls the transaction back: nothing is written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from ..core.session import SessionState
from ..errors import SessionNotFoundError

__all__ = ["Fenced", "NoChange", "Prior", "guard", "update_once"]

T = TypeVar("T")

#: Reads the rows of ``ids`` in a transaction, held by it (``dialect.Paths.lock``).
Lock = Callable[[list[str], AsyncConnection], Awaitable[dict[str, SessionState]]]
#: Saves one state at its version (``SessionStore.save``).
Save = Callable[[SessionState, AsyncConnection], Awaitable[SessionState]]


class Prior:
    """Session rows read earlier, unlocked, that one ``update`` may start from instead of
    reading (and locking) them again: its compare-and-swap then checks that they are still
    at the versions read.

    Taken once, and handed over (``update`` may change them in place): a retried transaction
    (a lost swap) reads the rows as usual.
    """

    __slots__ = ("_states",)

    def __init__(self, *states: SessionState) -> None:
        self._states = {s.session_id: s for s in states}

    def take(self, ids: Sequence[str]) -> dict[str, SessionState] | None:
        """The rows ``ids`` if all were read (once; ``None`` after, or if one is missing)."""
        states, self._states = self._states, {}
        if any(i not in states for i in ids):
            return None
        return {i: states[i] for i in ids}


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
    conn: AsyncConnection,
    prior: Prior | None = None,
    *,
    lock: Lock,
    save: Save,
) -> tuple[dict[str, SessionState], T]:
    """One attempt of ``update`` in ``conn``'s transaction: read the rows (or take them from
    ``prior``), mutate them, save each at the version read.

    Raises:
        SessionNotFoundError: a session does not exist.
        StaleStateError: a row changed since it was read (sent at once, or queued).
    """
    taken = prior.take(ids) if prior is not None else None
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
            return await update_once(ids, mutate, conn, lock=lock, save=save)
        return current, unchanged.value
    saved: dict[str, SessionState] = {}
    for sid in ids:
        state = current[sid]
        state.version = before[sid]
        saved[sid] = await save(state, conn)
    return saved, value
