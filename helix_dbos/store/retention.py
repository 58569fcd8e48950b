"""Retention: ended sessions deleted, with everything of theirs, once their retention passed.

A session tree (a root with its sub-agents and companions: one ``root_session_id``) is deleted
whole, or not at all. It is deleted when EVERY session in it

- has ended (``completed``, ``failed`` or ``interrupted``) and was last written before its
  agent's cutoff (``Retention``: per agent, else the default; an agent with neither is kept);
- is not hibernated, and is not a persistent agent's (no ``metadata.persistent`` mark, no
  ``helix.persistent`` workflow, and not of an agent type the caller names persistent);
- holds no completed call's tombstone still in its retention (a late duplicate answer must
  still be told ``already_completed``);
- has no DBOS workflow that is not over (``PENDING``, ``ENQUEUED``, ``DELAYED``) and no outbox
  row still queued.

What goes: the sessions' rows in ``__agents_states``, ``__agents_messages``,
``__agents_events``, ``__agents_checkpoints``, ``__agents_usage``, ``__agents_approvals``,
``__agents_notifications`` (all settled) and ``__agents_adoptions``, and DBOS's records of
their workflows (``helix:<session>:...``): the statements of DBOS's own
``SystemDatabase.delete_workflows`` (its ``workflow_input``, ``workflow_output`` and
``operation_outputs`` rows, then ``workflow_status``, whose delete cascades to its
notifications, events and streams). DBOS's ``garbage_collect`` does not do this job: it deletes
every workflow older than a cutoff, the ended turn workflows of hibernated and persistent
sessions included, whatever our retention says.

A batch is one transaction: its roots are claimed ``FOR UPDATE SKIP LOCKED`` (Postgres), so
two processes sweeping at once delete disjoint batches and every session once; a batch holds
at most ``batch`` trees' rows locked, for the milliseconds its deletes take. On SQLite a batch
holds the write lock as every write does.

The decision record (``__agents_approval_decisions``) is not the sessions': it survives their
deletion and has a retention of its own (``Retention.decisions``, ``HELIX_DECISION_RETENTION_DAYS``).
A sweep deletes the decisions past it in batches of their own, claimed the same way, and
never one whose approval still waits (``decisions.purge_decisions``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..core.periodic import Periodic
from ..observability.log import log_event
from .decisions import purge_decisions
from .dialect import backend_of
from .engine import joined
from .schema import ENDED_ROOT, states
from .store import SessionStore

__all__ = [
    "ENDED",
    "Retention",
    "RetentionSweeper",
    "SweepResult",
    "sweep",
    "sweep_batch",
]

ENDED = ("completed", "failed", "interrupted")
"""The statuses of a session whose turn is over."""

_LIVE_WORKFLOW = ("PENDING", "ENQUEUED", "DELAYED")
_PERSISTENT_WORKFLOW = "helix.persistent"
_C_COLLATIONS = {"c", "posix", "c.utf-8", "c.utf8", "ucs_basic"}


@dataclass(frozen=True)
class Retention:
    """How long an ended session is kept: per agent type, else ``default`` (seconds; ``None``:
    for ever). ``persistent``: agent types whose sessions are never deleted."""

    default: float | None = None
    by_agent: Mapping[str, float | None] = field(default_factory=dict)
    persistent: frozenset[str] = frozenset()
    decisions: float | None = None
    """How long the decision record is kept, its own period (seconds; ``None``: for ever),
    whatever happens to the sessions it is about."""

    @property
    def deletes_sessions(self) -> bool:
        return self.default is not None or any(v is not None for v in self.by_agent.values())

    @property
    def deletes_anything(self) -> bool:
        return self.deletes_sessions or self.decisions is not None

    def cutoffs(self, now: datetime) -> tuple[dict[str, datetime | None], datetime | None]:
        """(agent type -> its cutoff, the default cutoff); ``None``: never."""
        by = {
            agent: None if seconds is None else now - timedelta(seconds=seconds)
            for agent, seconds in self.by_agent.items()
        }
        default = None if self.default is None else now - timedelta(seconds=self.default)
        return by, default


@dataclass
class SweepResult:
    """What a sweep deleted (or, dry, would delete): trees, sessions, and rows by table."""

    trees: int = 0
    sessions: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    kept_trees: int = 0
    """Candidate roots whose tree had a session that must stay (judged and kept)."""
    cursor: tuple[datetime, str] | None = None
    """Where the next batch goes on (``sweep_batch``)."""
    decisions: int = 0
    """Decisions deleted from the record past its own retention (``decisions.py``)."""

    def add(self, other: SweepResult) -> None:
        self.trees += other.trees
        self.sessions += other.sessions
        self.kept_trees += other.kept_trees
        self.decisions += other.decisions
        for table, n in other.rows.items():
            self.rows[table] = self.rows.get(table, 0) + n


def _cutoff_clause(retention: Retention, now: datetime) -> tuple[str, dict[str, Any]] | None:
    """``updated_at`` past the agent's cutoff, as SQL with its parameters; ``None`` when no
    agent type may be deleted."""
    by, default = retention.cutoffs(now)
    params: dict[str, Any] = {}
    terms = []
    for i, (agent, cutoff) in enumerate(sorted(by.items())):
        params[f"agent_{i}"] = agent
        if cutoff is not None:
            params[f"cut_{i}"] = cutoff
            terms.append(f"(agent_type = :agent_{i} AND updated_at < :cut_{i})")
    if default is not None:
        params["cut_default"] = default
        named = ", ".join(f":agent_{i}" for i in range(len(by)))
        rest = f"agent_type NOT IN ({named}) AND " if by else ""
        terms.append(f"({rest}updated_at < :cut_default)")
    if not terms:
        return None
    return "(" + " OR ".join(terms) + ")", params


async def _collation_is_bytewise(conn: AsyncConnection) -> bool:
    query = backend_of(conn).collation
    if query is None:
        return True
    collation = await conn.scalar(sa.text(query))
    return str(collation).lower() in _C_COLLATIONS


Cursor = tuple[datetime, str]
"""Where a sweep goes on: the (``updated_at``, ``session_id``) of the last root it judged."""


async def _candidate_roots(
    conn: AsyncConnection, retention: Retention, now: datetime, batch: int, after: Cursor | None
) -> list[tuple[str, datetime]]:
    """Up to ``batch`` ended roots past their cutoff after ``after``, the oldest first
    (revision 0013's index), claimed: rows another sweeper holds are skipped."""
    clause = _cutoff_clause(retention, now)
    if clause is None:
        return []
    where, params = clause
    if after is not None:
        where += (
            " AND (updated_at > :after_at OR (updated_at = :after_at AND session_id > :after_id))"
        )
        params.update(after_at=after[0], after_id=after[1])
    persistent = sorted(retention.persistent)
    skip = ""
    if persistent:
        skip = " AND agent_type NOT IN :persistent"
        params["persistent"] = persistent
    lock = backend_of(conn).skip_locked
    query = sa.text(
        f"SELECT session_id, updated_at FROM __agents_states WHERE {ENDED_ROOT}"
        f" AND {where}{skip}"
        f" ORDER BY updated_at, session_id LIMIT :batch{lock}"
    )
    stamp = states.c.updated_at.type
    typed = [sa.bindparam(k, type_=stamp) for k in params if k.startswith(("cut_", "after_at"))]
    query = query.bindparams(*typed)
    if persistent:
        query = query.bindparams(sa.bindparam("persistent", expanding=True))
    columns = (sa.column("session_id", sa.String), sa.column("updated_at", stamp))
    rows = await conn.execute(query.columns(*columns), {**params, "batch": batch})
    return [(str(r[0]), r[1]) for r in rows]


def _tombstones_live(completed: Any, at_ms: int) -> bool:
    if not isinstance(completed, dict):
        return False
    for stone in completed.values():
        if isinstance(stone, dict):
            until = int(stone.get("completedAt", 0)) + int(stone.get("retentionMs", 0))
            if until > at_ms:
                return True
    return False


async def _trees(conn: AsyncConnection, roots: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The sessions of each root's tree (locked on Postgres), by root."""
    c = states.c
    query = sa.select(
        c.session_id, c.root_session_id, c.agent_type, c.status, c.updated_at, c.metadata,
        c.completed_client_tool_calls,
    ).where(c.root_session_id.in_(list(roots)))  # fmt: skip
    if backend_of(conn).row_locks:
        query = query.with_for_update()
    trees: dict[str, list[dict[str, Any]]] = {root: [] for root in roots}
    for r in await conn.execute(query):
        row = dict(r._mapping)
        row["metadata"] = row["metadata"] or {}
        trees[str(row["root_session_id"])].append(row)
    return trees


async def _workflows(
    conn: AsyncConnection, schema: str, session_ids: Iterable[str], bytewise: bool
) -> dict[str, list[tuple[str, str, str]]]:
    """DBOS's workflows of each session (``helix:<session>:...``): (id, status, name)."""
    table = backend_of(conn).dbos_table(schema, "workflow_status")
    found: dict[str, list[tuple[str, str, str]]] = {}
    for sid in session_ids:
        lo = f"helix:{sid}:"
        # A range of the primary key finds them when the collation orders bytes; the prefix
        # test keeps only this session's either way.
        ranged = "workflow_uuid >= :lo AND workflow_uuid < :hi AND " if bytewise else ""
        rows = await conn.execute(
            sa.text(
                f"SELECT workflow_uuid, status, name FROM {table} WHERE {ranged}"
                "substr(workflow_uuid, 1, :n) = :lo"
            ),
            {"lo": lo, "hi": f"helix:{sid};", "n": len(lo)},
        )
        found[sid] = [(str(w), str(s), str(n or "")) for w, s, n in rows]
    return found


async def _queued_outbox(conn: AsyncConnection, session_ids: Sequence[str]) -> set[str]:
    query = sa.text(
        "SELECT DISTINCT session_id FROM __agents_notifications"
        " WHERE session_id IN :ids AND state = 'queued'"
    ).bindparams(sa.bindparam("ids", expanding=True))
    return {str(r[0]) for r in await conn.execute(query, {"ids": list(session_ids)})}


def _keeps(
    tree: list[dict[str, Any]],
    workflows: Mapping[str, list[tuple[str, str, str]]],
    queued: set[str],
    retention: Retention,
    now: datetime,
) -> bool:
    """Whether a session of ``tree`` must stay (and with it the whole tree)."""
    by, default = retention.cutoffs(now)
    at = int(now.timestamp() * 1000)
    for s in tree:
        cutoff = by.get(s["agent_type"], default)
        updated = s["updated_at"]
        if updated.tzinfo is None:  # SQLite keeps UTC without its offset
            updated = updated.replace(tzinfo=UTC)
        if (
            s["status"] not in ENDED
            or cutoff is None
            or updated >= cutoff
            or "hibernated" in s["metadata"]
            or "persistent" in s["metadata"]
            or s["agent_type"] in retention.persistent
            or _tombstones_live(s["completed_client_tool_calls"], at)
            or s["session_id"] in queued
        ):
            return True
        for _, status, name in workflows.get(s["session_id"], []):
            if status in _LIVE_WORKFLOW or name == _PERSISTENT_WORKFLOW:
                return True
    return False


async def _delete(
    conn: AsyncConnection, schema: str, session_ids: list[str], workflow_ids: list[str]
) -> dict[str, int]:
    backend = backend_of(conn)
    counts: dict[str, int] = {}

    async def run(table: str, column: str, ids: list[str]) -> None:
        name = table.rpartition(".")[2]  # counted by the table's name, without its schema
        if not ids:
            counts[name] = counts.get(name, 0)
            return
        done = await conn.execute(
            sa.text(f"DELETE FROM {table} WHERE {column} IN :ids").bindparams(
                sa.bindparam("ids", expanding=True)
            ),
            {"ids": ids},
        )
        counts[name] = counts.get(name, 0) + int(done.rowcount or 0)

    # DBOS's own delete (SystemDatabase._delete_workflows): the payload tables, then the
    # status row, whose delete cascades to notifications, events and streams.
    for table in ("workflow_input", "workflow_output", "operation_outputs", "workflow_status"):
        await run(backend.dbos_table(schema, table), "workflow_uuid", workflow_ids)
    await run("__agents_adoptions", "workflow_id", workflow_ids)
    for table in (
        "__agents_messages",
        "__agents_events",
        "__agents_checkpoints",
        "__agents_usage",
        "__agents_approvals",
        "__agents_notifications",
        "__agents_states",
    ):
        await run(table, "session_id", session_ids)
    return counts


async def sweep_batch(
    store: SessionStore,
    retention: Retention,
    *,
    batch: int = 50,
    dry_run: bool = False,
    dbos_schema: str = "dbos",
    now: datetime | None = None,
    after: Cursor | None = None,
) -> SweepResult:
    """One batch in one transaction: claim up to ``batch`` ended roots past their retention
    (after ``after``), delete the trees none of whose sessions must stay (``dry_run``:
    count, and roll back). ``result.cursor``: the last root judged (``None``: the batch was
    not full, nothing more is past its retention now)."""
    now = now or datetime.now(UTC)
    result = SweepResult()

    class _DryRun(Exception):
        pass

    try:
        async with store.writing():
            conn = joined()
            claimed = await _candidate_roots(conn, retention, now, batch, after)
            if not claimed:
                return result
            if len(claimed) == batch:
                result.cursor = (claimed[-1][1], claimed[-1][0])
            trees = await _trees(conn, [root for root, _ in claimed])
            members = [s["session_id"] for tree in trees.values() for s in tree]
            bytewise = await _collation_is_bytewise(conn)
            workflows = await _workflows(conn, dbos_schema, members, bytewise)
            queued = await _queued_outbox(conn, members)
            doomed: list[str] = []
            for tree in trees.values():
                if _keeps(tree, workflows, queued, retention, now):
                    result.kept_trees += 1
                    continue
                result.trees += 1
                doomed += [s["session_id"] for s in tree]
            result.sessions = len(doomed)
            ids = [w for sid in doomed for w, _, _ in workflows.get(sid, [])]
            result.rows = await _delete(conn, dbos_schema, doomed, ids)
            if dry_run:
                raise _DryRun
    except _DryRun:
        pass
    return result


async def sweep(
    store: SessionStore,
    retention: Retention,
    *,
    batch: int = 50,
    dry_run: bool = False,
    dbos_schema: str = "dbos",
    max_batches: int | None = None,
    now: datetime | None = None,
) -> SweepResult:
    """Batches, each going on after the roots the last one judged, until one is not full
    (or ``max_batches``); then the decision record's own retention, in batches of its own
    (``decisions.purge_decisions``); what they deleted (``dry_run``: would delete, each batch
    rolled back)."""
    total = SweepResult()
    done, after = 0, None
    now = now or datetime.now(UTC)
    while retention.deletes_sessions and (max_batches is None or done < max_batches):
        got = await sweep_batch(
            store, retention, batch=batch, dry_run=dry_run, dbos_schema=dbos_schema,
            now=now, after=after,
        )  # fmt: skip
        total.add(got)
        done += 1
        if got.cursor is None:
            break
        after = got.cursor
    if retention.decisions is not None:
        before = int((now - timedelta(seconds=retention.decisions)).timestamp() * 1000)
        total.decisions = await purge_decisions(
            store, before, max_batches=max_batches, dry_run=dry_run
        )
    return total


class RetentionSweeper(Periodic):
    """A runtime's background sweeper: every ``interval_seconds`` a ``sweep`` (``start`` at
    launch, ``stop`` at shutdown; nothing runs when the retention deletes nothing)."""

    __slots__ = ("_retention", "_schema", "_store", "batch")

    def __init__(
        self,
        store: SessionStore,
        retention: Retention,
        interval_seconds: float,
        dbos_schema: str = "dbos",
    ) -> None:
        super().__init__(
            interval_seconds if retention.deletes_anything else 0, self._sweep, _sweep_failed
        )
        self._store = store
        self._schema = dbos_schema
        self._retention = retention
        self.batch = 50

    async def _sweep(self) -> None:
        done = await sweep(self._store, self._retention, batch=self.batch, dbos_schema=self._schema)
        if done.trees or done.decisions:
            log_event(
                "retention.swept",
                trees=done.trees,
                sessions=done.sessions,
                rows=done.rows,
                decisions=done.decisions,
            )


def _sweep_failed(exc: Exception) -> None:
    log_event("retention.sweep_failed", error=type(exc).__name__)
