"""The decision record (``__agents_approval_decisions``, revision 0012): every query of it.

A row is one answer to an approval (``approved``: counted towards a quorum, or deciding the
call; ``edited``; ``denied``) or an expiry's policy outcome (``expired``). It is written by
``queue`` inside the transaction that stores what it records (the submit's compare-and-swap,
the results commit of an expiry), so a decision is on record if and only if it took effect;
its ``decision_key`` is unique, so a replayed commit writes it once. Nothing updates a row;
``purge_decisions`` deletes those older than the record's own retention, in small claimed
batches, and never while their approval still waits (the retention sweeper and ``helix-dbos
prune`` call it, as does ``helix-dbos approvals --purge-decided``).

The list is newest first, a page at a time; each filter has an index whose key after the
filtered column is the order ``(decided_at, id)``, and the cursor is that key of a page's last
row.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..core.approval_policy import Decider, Tally
from ..core.session import PendingCall, SessionState
from ..errors import RequestValidationError
from .batch import DECISIONS, current_batch
from .dialect import backend_of
from .engine import joined
from .schema import approval_decisions, approvals
from .store import SessionStore

__all__ = [
    "DECISIONS_PAGE_DEFAULT",
    "DECISIONS_PAGE_MAX",
    "DECISION_CURSOR_PATTERN",
    "OUTCOMES",
    "PURGE_BATCH",
    "Decision",
    "DecisionPage",
    "DecisionQuery",
    "answer_row",
    "decisions_sql",
    "decisions_statement",
    "expiry_row",
    "list_decisions",
    "purge_batch",
    "purge_decisions",
    "queue",
]

DECISIONS_PAGE_DEFAULT = 50
DECISIONS_PAGE_MAX = 500
#: What a decision did: ``approved`` (counted, or deciding), ``edited`` (an approval of edited
#: arguments), ``denied``, ``expired`` (the deadline's policy).
OUTCOMES = ("approved", "edited", "denied", "expired")
DECISION_CURSOR_PATTERN = r"^[0-9]{1,16}\.[0-9]{1,19}$"
_CURSOR = re.compile(DECISION_CURSOR_PATTERN.strip("^$"))

_d = approval_decisions
_ORDER = (_d.c.decided_at, _d.c.id)


@dataclass(frozen=True)
class Decision:
    """One row of the decision record."""

    id: int
    approval_id: str
    session_id: str
    root_session_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    args_digest: str | None
    edited_digest: str | None
    outcome: str
    final: bool
    """Whether it decided the call (a partial approval of a quorum did not)."""
    votes: int | None
    """Approvals counted on the current arguments after it (a quorum's progress)."""
    quorum: int | None
    reason: str | None
    on_timeout: str | None
    principal: str | None
    """Who decided, as the credential established it (``None``: an expiry, or a decider
    without a principal)."""
    tenant: str | None
    credential: str
    roles: list[str] | None
    owner_principal: str | None
    """The session's owner (who asked)."""
    owner_tenant: str | None
    decided_at: int

    def dump(self) -> dict[str, Any]:
        """The wire form (camelCase)."""
        return {
            "id": self.id,
            "approvalId": self.approval_id,
            "sessionId": self.session_id,
            "rootSessionId": self.root_session_id,
            "runId": self.run_id,
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "argsDigest": self.args_digest,
            "editedDigest": self.edited_digest,
            "outcome": self.outcome,
            "final": self.final,
            "votes": self.votes,
            "quorum": self.quorum,
            "reason": self.reason,
            "onTimeout": self.on_timeout,
            "principal": self.principal,
            "tenant": self.tenant,
            "credential": self.credential,
            "roles": self.roles,
            "ownerPrincipal": self.owner_principal,
            "ownerTenant": self.owner_tenant,
            "decidedAt": self.decided_at,
        }


@dataclass(frozen=True)
class DecisionPage:
    """A page of the record, newest first, and the cursor of the next (``None``: the last)."""

    decisions: list[Decision]
    next_cursor: str | None

    def dump(self) -> dict[str, Any]:
        """The wire form: ``{decisions, nextCursor}``."""
        return {"decisions": [d.dump() for d in self.decisions], "nextCursor": self.next_cursor}


@dataclass(frozen=True)
class DecisionQuery:
    """What to list; every filter given must hold. ``owner_principal`` / ``owner_tenant``:
    the session's owner (the inbox's scope); ``principal``: the decider; ``session_id``: the
    root session; ``since`` / ``until``: decided at or after / before (epoch ms)."""

    tool: str | None = None
    session_id: str | None = None
    approval_id: str | None = None
    principal: str | None = None
    owner_principal: str | None = None
    owner_tenant: str | None = None
    outcome: str | None = None
    since: int | None = None
    until: int | None = None
    limit: int = DECISIONS_PAGE_DEFAULT
    cursor: str | None = None


async def queue(rows: list[dict[str, Any]]) -> None:
    """Write decision rows in the unit of work bound to the task; a row whose key exists is
    dropped. On Postgres inside a store transaction they join its one statement."""
    if not rows:
        return
    conn = joined()
    batch = current_batch(conn)
    if batch is not None:
        batch.append(DECISIONS, [dict(r) for r in rows])
        return
    insert = backend_of(conn).insert(_d).on_conflict_do_nothing(index_elements=["decision_key"])
    await conn.execute(insert, [dict(r) for r in rows])


def answer_row(
    owner: SessionState,
    entry: PendingCall,
    who: Decider,
    tally: Tally,
    decision: dict[str, Any],
    at: int,
) -> dict[str, Any]:
    """The row of one answer just counted on ``entry`` (``tally``: what it did; ``decision``:
    the answer as validated, before the quorum's bookkeeping)."""
    policy = entry.policy or {}
    approved = bool(decision.get("approved"))
    edited = "editedInput" in decision
    # The arguments it was given for, when not the call's own: an edit's digest.
    other = tally.digest if tally.digest != entry.args_digest else None
    return {
        **_call(owner, entry),
        "decision_key": f"answer:{entry.approval_id}:{policy.get('decisions', 1)}",
        "edited_digest": other,
        "outcome": ("edited" if edited else "approved") if approved else "denied",
        "final": tally.effect == "decided",
        "votes": tally.votes if approved else None,
        "quorum": tally.quorum,
        "reason": decision.get("reason"),
        "on_timeout": None,
        "principal": who.principal,
        "tenant": who.tenant,
        "credential": who.credential,
        "roles": list(who.roles) if who.roles else None,
        "decided_at": at,
    }


def expiry_row(owner: SessionState, entry: PendingCall, on_timeout: str, at: int) -> dict[str, Any]:
    """The row of an approval whose deadline lapsed: the policy's outcome, by the deadline."""
    policy = entry.policy or {}
    votes = policy.get("votes")
    return {
        **_call(owner, entry),
        "decision_key": f"expired:{entry.approval_id}",
        "edited_digest": policy.get("digest"),
        "outcome": "expired",
        "final": True,
        "votes": len(votes) if votes else None,
        "quorum": int(policy.get("quorum", 1)),
        "reason": f"the deadline lapsed; on_timeout {on_timeout}",
        "on_timeout": on_timeout,
        "principal": None,
        "tenant": None,
        "credential": "deadline",
        "roles": None,
        "decided_at": at,
    }


def _call(owner: SessionState, entry: PendingCall) -> dict[str, Any]:
    return {
        "approval_id": entry.approval_id,
        "session_id": owner.session_id,
        "root_session_id": owner.root_session_id,
        "run_id": entry.run_id,
        "tool_call_id": entry.tool_call_id,
        "tool_name": entry.tool_name,
        "args_digest": entry.args_digest,
        "owner_principal": owner.principal,
        "owner_tenant": owner.tenant,
    }


def _decode(cursor: str) -> tuple[int, int]:
    if not isinstance(cursor, str) or _CURSOR.fullmatch(cursor) is None:
        raise RequestValidationError("The cursor is not one this list gives out", cause="cursor")
    at, row_id = cursor.split(".")
    return int(at), int(row_id)


def decisions_statement(query: DecisionQuery) -> sa.Select[Any]:
    """The list's SELECT for ``query``, newest first, without its limit."""
    c = _d.c
    select = sa.select(_d)
    for column, value in (
        (c.tool_name, query.tool),
        (c.root_session_id, query.session_id),
        (c.approval_id, query.approval_id),
        (c.principal, query.principal),
        (c.owner_principal, query.owner_principal),
        (c.owner_tenant, query.owner_tenant),
        (c.outcome, query.outcome),
    ):
        if value is not None:
            select = select.where(column == value)
    if query.since is not None:
        select = select.where(c.decided_at >= query.since)
    if query.until is not None:
        select = select.where(c.decided_at < query.until)
    if query.cursor is not None:
        select = select.where(sa.tuple_(*_ORDER) < sa.tuple_(*_decode(query.cursor)))
    return select.order_by(c.decided_at.desc(), c.id.desc())


#: The columns a page reads, in ``Decision``'s order (Postgres's text statement).
_FIELDS = tuple(f.name for f in dataclasses.fields(Decision))
#: The equality filters: (column, ``DecisionQuery`` field).
_FILTERS = (
    ("tool_name", "tool"),
    ("root_session_id", "session_id"),
    ("approval_id", "approval_id"),
    ("principal", "principal"),
    ("owner_principal", "owner_principal"),
    ("owner_tenant", "owner_tenant"),
    ("outcome", "outcome"),
)


def decisions_sql(query: DecisionQuery) -> tuple[str, dict[str, Any]]:
    """Postgres: ``decisions_statement`` as text with its parameters, and its limit (a row
    more than the page: whether another follows). The same filters, order and index."""
    where: list[str] = []
    params: dict[str, Any] = {}
    for column, name in _FILTERS:
        value = getattr(query, name)
        if value is not None:
            where.append(f"{column} = %({name})s")
            params[name] = value
    if query.since is not None:
        where.append("decided_at >= %(since)s")
        params["since"] = query.since
    if query.until is not None:
        where.append("decided_at < %(until)s")
        params["until"] = query.until
    if query.cursor is not None:
        where.append("(decided_at, id) < (%(after_at)s, %(after_id)s)")
        params["after_at"], params["after_id"] = _decode(query.cursor)
    params["limit"] = query.limit + 1
    filtered = f" WHERE {' AND '.join(where)}" if where else ""
    sql = (
        f"SELECT {', '.join(_FIELDS)} FROM {_d.name}{filtered}"
        " ORDER BY decided_at DESC, id DESC LIMIT %(limit)s"
    )
    return sql, params


def _decision(values: tuple[Any, ...]) -> Decision:
    """A row of ``_FIELDS``' columns, as a ``Decision``."""
    found = Decision(*values)
    roles = found.roles
    if isinstance(roles, str) or not isinstance(found.final, bool):  # SQLite's forms
        decoded = json.loads(roles) if isinstance(roles, str) else roles
        found = dataclasses.replace(found, final=bool(found.final), roles=decoded)
    return found


async def list_decisions(store: SessionStore, query: DecisionQuery) -> DecisionPage:
    """One page of the decisions matching ``query``, newest first.

    On Postgres the page is one statement on its own (``SessionStore.read_statement``):
    no transaction, no checkout of SQLAlchemy's pool, planned once per connection. Through
    SQLAlchemy the same read took three round trips (BEGIN, the SELECT, COMMIT) and its
    engine's work, 15 to 20 times the statement's own 0.1 to 0.5 ms at 100,000 decisions.

    Raises:
        RequestValidationError: a limit out of range, a bad cursor or outcome.
    """
    if not 1 <= query.limit <= DECISIONS_PAGE_MAX:
        raise RequestValidationError(
            f"limit must be between 1 and {DECISIONS_PAGE_MAX}", cause="limit"
        )
    if query.outcome is not None and query.outcome not in OUTCOMES:
        raise RequestValidationError(f"outcome must be one of {OUTCOMES}", cause="outcome")
    if store.many_writers:  # Postgres: one statement on the read connections
        rows = await store.read_statement(*decisions_sql(query))
    else:
        columns = [_d.c[name] for name in _FIELDS]
        select = decisions_statement(query).with_only_columns(*columns).limit(query.limit + 1)
        async with store.transaction() as conn:
            rows = [tuple(r) for r in await conn.execute(select)]
    page = [_decision(r) for r in rows[: query.limit]]
    last = page[-1] if page and len(rows) > query.limit else None
    return DecisionPage(page, f"{last.decided_at}.{last.id}" if last else None)


#: Decisions deleted per transaction by ``purge_decisions``: each batch holds its rows locked
#: for the milliseconds its delete takes, and a sweep of millions never holds them all.
PURGE_BATCH = 500


def _purgeable(before: int, batch: int | None, row_locks: bool) -> sa.Select[Any]:
    """Up to ``batch`` ids of decisions made before ``before`` whose approval no longer waits
    (no row of its call in the inbox table: a quorum's partial approvals stay while it
    waits), the oldest first; claimed on Postgres (rows another sweeper holds are skipped)."""
    a = approvals.c
    waiting = (
        sa.select(sa.literal(1))
        .where(a.session_id == _d.c.session_id)
        .where(a.tool_call_id == _d.c.tool_call_id)
        .where(a.approval_id == _d.c.approval_id)
    )
    select = (
        sa.select(_d.c.id)
        .where(_d.c.decided_at < before)
        .where(~waiting.exists())
        .order_by(*_ORDER)
        .limit(batch)
    )
    if row_locks and batch is not None:
        select = select.with_for_update(skip_locked=True)
    return select


async def purge_batch(store: SessionStore, before: int, batch: int = PURGE_BATCH) -> int:
    """One transaction: delete up to ``batch`` decisions made before ``before`` (epoch ms)
    whose approval no longer waits. Returns how many it deleted."""
    async with store.transaction() as conn:
        ids = [
            r[0] for r in await conn.execute(_purgeable(before, batch, backend_of(conn).row_locks))
        ]
        if not ids:
            return 0
        done = await conn.execute(_d.delete().where(_d.c.id.in_(ids)))
    return int(done.rowcount or 0)


async def purge_decisions(
    store: SessionStore,
    before: int,
    *,
    batch: int = PURGE_BATCH,
    max_batches: int | None = None,
    dry_run: bool = False,
) -> int:
    """Delete the decisions made before ``before`` (epoch ms), in batches of ``batch``, each
    its own transaction: the record's retention, its own (the sessions' rows are kept or
    deleted apart). A decision whose approval still waits (a quorum's partial approval) is
    kept, however old. Returns how many were deleted (``dry_run``: would be; nothing is)."""
    if dry_run:
        async with store.transaction() as conn:
            ids = _purgeable(before, None, backend_of(conn).row_locks).subquery()
            return int(await conn.scalar(sa.select(sa.func.count()).select_from(ids)) or 0)
    total, done = 0, 0
    while max_batches is None or done < max_batches:
        deleted = await purge_batch(store, before, batch)
        total += deleted
        done += 1
        if deleted < batch:
            break
    return total
