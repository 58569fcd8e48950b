"""Session rows (``__agents_states``): a new row, the compare-and-swap of one, and the reads
of many (a page of recent ones, the reconciler's, a tree's).

Every write of a row is a compare-and-swap on its ``version``: ``save`` writes a state only if
the row is still at the version it was read at. In a transaction that queues its writes
(Postgres, ``batch.py``) the write is queued, and the swap is checked when the queue is sent.
The reads of one row (or a few, by id) differ by dialect: ``dialect.Paths``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..core.session import SessionState
from ..errors import StaleStateError
from . import row as session_row
from .batch import STATE_COLUMNS, current_batch
from .checkpoints import pointer_for
from .engine import StoreEngine
from .limits import check_size
from .schema import states

__all__ = ["create", "descendants", "recent", "save", "settled_before"]

# Built once: SQLAlchemy then neither rebuilds it nor recomputes its cache key on each call
# (a measurable share of a round trip's CPU).
_SAVE_STATE = (
    states.update()
    .where(
        states.c.session_id == sa.bindparam("b_session_id"),
        states.c.version == sa.bindparam("b_version"),
    )
    .values(
        version=states.c.version + 1,
        updated_at=sa.bindparam("b_updated_at", type_=states.c.updated_at.type),
        **{name: sa.bindparam(name, type_=states.c[name].type) for name in STATE_COLUMNS},
    )
)

#: The statuses of a session whose turn is under way (or waits on a client).
_ACTIVE_STATUSES = ["running", "suspended_client_tool"]


async def create(
    db: StoreEngine, state: SessionState, conn: AsyncConnection | None
) -> SessionState:
    """Insert a new session row; the state at version 0."""
    now = datetime.now(UTC)
    batch = current_batch(conn)
    if batch is not None:
        await batch.create(
            state.session_id, {"created_at": now.isoformat(), **session_row.encode(state)}
        )
        return state.model_copy(update={"version": 0})
    async with db.transaction(conn) as c:
        await c.execute(
            states.insert().values(
                session_id=state.session_id,
                version=0,
                event_seq=0,
                created_at=now,
                updated_at=now,
                **session_row.encode(state),
            )
        )
    return state.model_copy(update={"version": 0})


async def save(
    db: StoreEngine,
    state: SessionState,
    conn: AsyncConnection | None,
    *,
    max_state_bytes: int | None,
) -> SessionState:
    """Write ``state`` if the row is still at ``state.version``; the state at version + 1.

    Raises:
        StateSizeExceededError: its pending map is over ``max_state_bytes``.
        StaleStateError: another writer changed the row first (when the queue is sent, in a
            transaction that queues its writes).
    """
    check_size(state, max_state_bytes)
    values = session_row.encode(state)
    pointed = pointer_for(state.session_id)
    if pointed is not None:
        values["latest_checkpoint_id"] = pointed
    batch = current_batch(conn)
    if batch is not None:
        # Checked when the queue is sent: a lost race fails the transaction then.
        values["updated_at"] = datetime.now(UTC).isoformat()
        await batch.save(state.session_id, state.version, values)
        return state.model_copy(update={"version": state.version + 1})
    values.update(
        b_session_id=state.session_id, b_version=state.version, b_updated_at=datetime.now(UTC)
    )
    async with db.transaction(conn) as c:
        result = await c.execute(_SAVE_STATE, values)
    if result.rowcount != 1:
        raise StaleStateError(
            f"Session {state.session_id!r} changed since version {state.version}",
            sessionId=state.session_id,
        )
    return state.model_copy(update={"version": state.version + 1})


async def recent(
    db: StoreEngine,
    *,
    status: str | None,
    agent_type: str | None,
    limit: int,
    conn: AsyncConnection | None,
) -> list[SessionState]:
    """Recent sessions, newest first."""
    query = states.select().order_by(states.c.updated_at.desc()).limit(limit)
    if status:
        query = query.where(states.c.status == status)
    if agent_type:
        query = query.where(states.c.agent_type == agent_type)
    async with db.read(conn) as c:
        return [session_row.decode(r._mapping) for r in (await c.execute(query)).all()]


async def settled_before(
    db: StoreEngine,
    cutoff: datetime,
    *,
    active: bool,
    workflow_ids: Sequence[str] | None,
    limit: int,
    conn: AsyncConnection | None,
) -> list[SessionState]:
    """Sessions last written before ``cutoff``: the active ones not hibernated, or the ended
    ones whose workflow is among ``workflow_ids`` (what the reconciler inspects)."""
    query = states.select().where(states.c.updated_at < cutoff)
    if active:
        # Revision 0011's predicate, verbatim: the page is read off its partial index.
        query = query.where(sa.text(db.backend.live_row))
    else:
        query = query.where(states.c.status.not_in(_ACTIVE_STATUSES))
    if workflow_ids is not None:
        # Revision 0014's index: a lookup per id. No ORDER BY ... LIMIT here: with one, the
        # planner may walk ``updated_at`` through every session (hibernated ones included)
        # for the few that match; the page of ids bounds the rows instead, sorted below.
        query = query.where(states.c.workflow_id.in_(list(workflow_ids)))
        async with db.read(conn) as c:
            rows = sorted((await c.execute(query)).all(), key=lambda r: r.updated_at)
        return [session_row.decode(r._mapping) for r in rows[:limit]]
    query = query.order_by(states.c.updated_at).limit(limit)
    async with db.read(conn) as c:
        return [session_row.decode(r._mapping) for r in (await c.execute(query)).all()]


async def descendants(
    db: StoreEngine, root_session_id: str, conn: AsyncConnection | None
) -> list[SessionState]:
    """Every session of a tree except the root, parents before children."""
    async with db.read(conn) as c:
        rows = (
            await c.execute(
                states.select()
                .where(
                    states.c.root_session_id == root_session_id,
                    states.c.session_id != root_session_id,
                )
                .order_by(states.c.created_at)
            )
        ).all()
    return [session_row.decode(r._mapping) for r in rows]
