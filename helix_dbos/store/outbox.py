"""The notification outbox (``__agents_notifications``, revision 0009): every query of it.

A row is one event of a parked call that the app's notification hooks are told: ``pending``,
``deadline_near``, ``expired`` or ``resolved``. It is written by ``queue`` inside the
transaction that commits what it reports (the park, the answer, the expiry, the stop), so an
event is recorded if and only if its cause committed; its ``event_key`` is unique, so a
replayed commit writes it once. A dispatcher (``runtime/_notifications/dispatcher.py``) then ``claim``\\ s the
rows that are due, calls the hooks, and settles each row: ``deliver`` (or ``skip``), or
``retry`` later, or ``give_up``.

A claim moves the row's ``due_at`` to the end of a lease and counts the attempt, in the
claiming transaction: another dispatcher does not take it while the lease runs (on Postgres
the claim's ``FOR UPDATE SKIP LOCKED`` also keeps two claims from taking the same row at the
same time), and a dispatcher that died mid-delivery leaves a row that is due again when the
lease ends. That is what makes delivery at least once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from .batch import OUTBOX, current_batch, settle
from .dialect import backend_of
from .engine import joined
from .schema import notifications
from .store import SessionStore

__all__ = [
    "DELIVERED",
    "GAVE_UP",
    "QUEUED",
    "SKIPPED",
    "OutboxRow",
    "any_due",
    "claim",
    "deliver",
    "give_up",
    "list_rows",
    "purge",
    "queue",
    "retry",
    "skip",
]

QUEUED: Final = "queued"
"""Not settled yet: due at ``due_at`` (or claimed, until its lease ends)."""
DELIVERED: Final = "delivered"
"""Every hook of its kind returned."""
SKIPPED: Final = "skipped"
"""Nothing to tell: a reminder of a call answered before it was due."""
GAVE_UP: Final = "gave_up"
"""A hook kept failing for every attempt the dispatcher allows."""

_n = notifications


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One row of ``__agents_notifications``."""

    id: int
    event_key: str
    kind: str
    session_id: str
    root_session_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    payload: dict[str, Any]
    created_at: int
    due_at: int
    attempts: int
    state: str
    settled_at: int | None
    last_error: str | None


def _row(found: Any) -> OutboxRow:
    return OutboxRow(**{c.name: getattr(found, c.name) for c in _n.columns})


async def queue(rows: Sequence[dict[str, Any]]) -> None:
    """Write notification rows in the unit of work; a row whose key exists is dropped.

    ``rows``: ``{event_key, kind, session_id, root_session_id, run_id, tool_call_id,
    tool_name, payload, created_at, due_at}``. On Postgres inside a transaction of the store
    they join its one statement (``batch.py``); elsewhere they are inserted at once.
    """
    if not rows:
        return
    conn = joined()
    batch = current_batch(conn)
    if batch is not None:
        batch.append(OUTBOX, [dict(r) for r in rows])
        return
    insert = backend_of(conn).insert(_n).on_conflict_do_nothing(index_elements=["event_key"])
    await conn.execute(insert, [{**r, "attempts": 0, "state": QUEUED} for r in rows])


def _due(now: int, kinds: list[str]) -> sa.Select[tuple[int]]:
    return (
        sa.select(_n.c.id)
        .where(_n.c.state == QUEUED, _n.c.due_at <= now, _n.c.kind.in_(kinds))
        .order_by(_n.c.due_at, _n.c.id)
    )


async def any_due(store: SessionStore, *, now: int, kinds: Iterable[str]) -> bool:
    """Whether a row of ``kinds`` is due, read outside any transaction: an idle dispatcher's
    poll takes no lock (on SQLite, a claim's transaction holds the one writer's lock)."""
    wanted = list(kinds)
    if not wanted:
        return False
    async with store.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        found = (await conn.execute(_due(now, wanted).limit(1))).first()
    return found is not None


async def claim(*, now: int, lease_until: int, kinds: Iterable[str], limit: int) -> list[OutboxRow]:
    """Take up to ``limit`` due rows of ``kinds``, oldest due first, in the unit of work: each is due again at ``lease_until`` and counts one more attempt (the
    returned rows carry the new count). Rows another transaction holds are passed over."""
    wanted = list(kinds)
    if not wanted:
        return []
    conn = joined()
    await settle(conn, (OUTBOX,))
    # SQLite has one writer at a time: no FOR UPDATE clause there.
    due = _due(now, wanted).limit(limit).with_for_update(skip_locked=True)
    taken = await conn.execute(
        _n.update()
        .where(_n.c.id.in_(due.scalar_subquery()))
        .values(due_at=lease_until, attempts=_n.c.attempts + 1)
        .returning(*_n.columns)
    )
    return sorted((_row(r) for r in taken), key=lambda r: (r.created_at, r.id))


async def _settle(store: SessionStore, row_id: int, **values: Any) -> None:
    """Set ``values`` on a queued row, in the unit of work bound to the task or in one of its
    own."""
    stmt = _n.update().where(_n.c.id == row_id, _n.c.state == QUEUED).values(**values)

    async def body() -> None:
        conn = joined()
        await settle(conn, (OUTBOX,))
        await conn.execute(stmt)

    await store.transact(body)


async def deliver(store: SessionStore, row_id: int, at: int) -> None:
    """Settle a row as delivered (its hooks returned)."""
    await _settle(store, row_id, state=DELIVERED, settled_at=at)


async def skip(store: SessionStore, row_id: int, at: int) -> None:
    """Settle a row with nothing to tell."""
    await _settle(store, row_id, state=SKIPPED, settled_at=at)


async def retry(store: SessionStore, row_id: int, due_at: int, error: str) -> None:
    """Leave a row queued, due again at ``due_at``, with the error of the failed attempt."""
    await _settle(store, row_id, due_at=due_at, last_error=error)


async def give_up(store: SessionStore, row_id: int, at: int, error: str) -> None:
    """Settle a row whose hook failed every attempt."""
    await _settle(store, row_id, state=GAVE_UP, settled_at=at, last_error=error)


async def purge(store: SessionStore, settled_before: int, limit: int = 1000) -> int:
    """Delete up to ``limit`` settled rows settled before ``settled_before``; how many."""
    old = (
        sa.select(_n.c.id)
        .where(_n.c.state != QUEUED, _n.c.settled_at < settled_before)
        .limit(limit)
        .scalar_subquery()
    )

    async def body() -> int:
        done = await joined().execute(_n.delete().where(_n.c.id.in_(old)))
        return int(done.rowcount or 0)

    return await store.transact(body)


async def list_rows(
    store: SessionStore, session_id: str | None = None, kind: str | None = None
) -> list[OutboxRow]:
    """The rows (of one session, of one kind), in the order they were written."""
    query = sa.select(_n).order_by(_n.c.id)
    if session_id is not None:
        query = query.where(_n.c.session_id == session_id)
    if kind is not None:
        query = query.where(_n.c.kind == kind)

    async def body() -> list[OutboxRow]:
        return [_row(r) for r in await joined().execute(query)]

    return await store.transact(body)
