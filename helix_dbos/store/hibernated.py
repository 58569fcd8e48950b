"""Hibernated turns whose batch is due: the deadline keeper's one query and its claim.

A hibernated session's row carries its mark (``metadata.hibernated``) with ``dueAt``: when
its continuation must start with no request (the batch's last unanswered deadline; ``0``
once a submit completed the batch or a new message abandoned it). Revision 0010 indexes that
value on hibernated rows only, so the keeper's query reads the due rows off the index,
whatever the number of sessions parked.

A claim moves ``dueAt`` to the end of a lease in a compare-and-swap of the row: of two
keepers (two processes) one claims the batch and starts its continuation; a keeper that died
before the continuation's results commit removed the mark leaves a batch that is due again
when the lease ends, and the continuation's id is derived from the row, so starting it again
starts nothing new.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa

from ..core.session import SessionState
from . import row as session_row
from .schema import HIBERNATED_DUE_INDEX, states
from .store import NoChange, SessionStore

__all__ = [
    "DUE_INDEX",
    "DueBatch",
    "claim_due",
    "claim_due_batches",
    "due_sessions",
    "touched_hibernated",
]

DUE_INDEX = HIBERNATED_DUE_INDEX
"""The partial expression index of revision 0010."""


async def due_sessions(
    store: SessionStore, now: int, limit: int, agent_types: Sequence[str]
) -> list[str]:
    """Up to ``limit`` hibernated sessions of ``agent_types`` due at ``now``, the most
    overdue first (a keeper continues only the agents its process runs)."""
    if not agent_types:
        return []
    # The index's expression and predicate, verbatim: the planner then uses the index.
    due, hibernated = store.backend.hibernated_due, store.backend.hibernated_row
    query = sa.text(
        f"SELECT session_id FROM __agents_states WHERE {hibernated} AND {due} <= :now "
        f"AND agent_type IN :types ORDER BY {due} LIMIT :limit"
    ).bindparams(sa.bindparam("types", expanding=True))
    async with store.engine.connect() as conn:
        rows = await conn.execute(query, {"now": now, "limit": limit, "types": list(agent_types)})
        return [str(r[0]) for r in rows]


async def claim_due(
    store: SessionStore, session_id: str, now: int, lease_ms: int
) -> SessionState | None:
    """Claim one due batch: its ``dueAt`` moves to ``now + lease_ms`` (compare-and-swap).
    The claimed row, or ``None`` if it is no longer hibernated or due (another keeper, a
    submit or a stop came first)."""

    def claim(states: dict[str, SessionState]) -> bool:
        mark: Any = states[session_id].metadata.get("hibernated")
        if not isinstance(mark, dict) or int(mark.get("dueAt", 0)) > now:
            raise NoChange(False)
        mark["dueAt"] = now + lease_ms
        return True

    saved, claimed = await store.update([session_id], claim)
    return saved[session_id] if claimed else None


class DueBatch(NamedTuple):
    """A claimed due batch: what starting its continuation needs (``claim_due_batches``)."""

    session_id: str
    agent_type: str
    root_session_id: str
    run_id: str | None
    mark: dict[str, Any]
    """The row's ``metadata.hibernated``, as the claim left it."""


async def _claim_each(
    store: SessionStore, now: int, lease_ms: int, limit: int, agent_types: Sequence[str]
) -> list[SessionState]:
    """SQLite's claim (one writer at a time): each due row by its own compare-and-swap
    (``claim_due``), the most overdue first; the claimed rows."""
    claimed: list[SessionState] = []
    while len(claimed) < limit:
        # Another keeper may take some of the rows read: read again for the rest, so that a
        # short page still means that no more rows are due.
        want = limit - len(claimed)
        due = await due_sessions(store, now, want, agent_types)
        got = [s for s in [await claim_due(store, sid, now, lease_ms) for sid in due] if s]
        claimed += got
        if len(due) < want or not got:
            break
    return claimed


async def claim_due_batches(
    store: SessionStore, now: int, lease_ms: int, limit: int, agent_types: Sequence[str]
) -> list[DueBatch]:
    """Claim up to ``limit`` due batches of ``agent_types`` (the most overdue first): each
    row's ``dueAt`` moves to ``now + lease_ms``; of each claimed row, what its continuation's
    start needs.

    On Postgres one statement claims the page and returns five columns a row (the backend's
    ``claim_due_batches``: nothing is decoded into a ``SessionState``); on SQLite each due row
    is claimed by its own compare-and-swap (``_claim_each``).
    """
    if not agent_types:
        return []
    claim = store.backend.claim_due_batches
    if claim is None:
        return [
            DueBatch(s.session_id, s.agent_type, s.root_session_id, s.run_id, mark)
            for s in await _claim_each(store, now, lease_ms, limit, agent_types)
            if isinstance(mark := s.metadata.get("hibernated"), dict)
        ]
    rows = await store.write_statement(
        claim,
        {"now": now, "types": list(agent_types), "limit": limit, "until": now + lease_ms},
    )
    return [DueBatch(*row) for row in rows]


async def touched_hibernated(
    store: SessionStore, since: datetime, before: datetime, limit: int = 500
) -> list[SessionState]:
    """Hibernated sessions written between ``since`` and ``before`` (the reconciler looks
    for a complete batch nobody made due among them): a range of the ``updated_at`` index,
    so a pass reads the recently touched rows, not every hibernated one."""
    query = (
        states.select()
        .where(states.c.updated_at >= since, states.c.updated_at < before)
        .where(sa.text(store.backend.hibernated_row))
        .order_by(states.c.updated_at)
        .limit(limit)
    )
    async with store.engine.connect() as conn:
        return [session_row.decode(r._mapping) for r in (await conn.execute(query)).all()]
