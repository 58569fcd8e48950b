"""The session rows a unit of work was told its caller read, so that its writes swap from them.

A unit of work (``SessionStore.transact``) says what it reads and writes; the store decides how.
One of those decisions is here: a caller that read a session row (before the unit began, or
in it, unlocked) says so (``transact(read=...)``, ``SessionStore.read_earlier``), and the
unit's next ``update`` of that row swaps from it instead of reading it again, locked. The swap
checks that the row is still at the version read: a row changed meanwhile fails it, and the
unit runs again, this time reading every row it updates locked. On Postgres that makes the
common commit (read, then write one row) one statement with no transaction around it.

A row said read is handed over: the update that takes it changes it in place, and is the only
one that takes it. A row written by other means meanwhile (``save``, ``create_session``) is
forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from ..core.session import SessionState

__all__ = ["drop", "forget", "remember", "remembering", "take"]

_rows: ContextVar[dict[str, SessionState] | None] = ContextVar("helix_unit_rows", default=None)
"""The rows the running unit of work was told were read, by session id (``None``: no unit, or
a retry)."""


@contextmanager
def remembering(rows: Iterable[SessionState], *, first_attempt: bool) -> Iterator[None]:
    """Within this block (one attempt of a unit of work), remember ``rows`` and the rows said
    read; a retried attempt remembers nothing (the attempt it retries lost a swap)."""
    token = _rows.set({s.session_id: s for s in rows} if first_attempt else None)
    try:
        yield
    finally:
        _rows.reset(token)


def remember(states: Iterable[SessionState]) -> None:
    """Remember rows said read, if a unit of work's first attempt is running."""
    rows = _rows.get()
    if rows is not None:
        for state in states:
            rows[state.session_id] = state


def forget(session_id: str) -> None:
    """The row was written by other means: the next update reads it."""
    rows = _rows.get()
    if rows is not None:
        rows.pop(session_id, None)


def take(ids: Sequence[str]) -> dict[str, SessionState] | None:
    """The remembered rows ``ids``, handed over (taken once), or ``None`` unless all of them
    are remembered."""
    rows = _rows.get()
    if rows is None or any(i not in rows for i in ids):
        return None
    return {i: rows.pop(i) for i in ids}


def drop() -> None:
    """Remember nothing more in this attempt: it runs again from its start, and what its
    first run remembered may have been changed in place by that run's updates."""
    _rows.set(None)
