"""A fleet of processes on one database: executor liveness, adoption, moving turns forward.

Every launched runtime is one *executor*: it records itself in ``__agents_executors`` and
heartbeats there every ``heartbeat_seconds``. An executor whose heartbeat is older than
``adopt_after_seconds`` (or that stopped cleanly) is dead. Each live process sweeps once per
heartbeat:

* **Adoption.** PENDING turn workflows whose executor is dead, of this process's application
  version, are taken over: the process claims the dead executor's row with a compare-and-swap
  (one transaction; of two survivors racing, exactly one wins), then hands its workflows to
  DBOS's own recovery (``DBOS._recover_pending_workflows``), which re-enqueues them; DBOS's
  atomic dequeue gives each exactly one runner, rewrites its ``executor_id`` to that live
  process, and the turn replays to where it was parked. Each one is recorded in
  ``__agents_adoptions`` and logged (``fleet.adopted``).
* **Moving forward.** PENDING turns of another application version that this contract replays
  (``forward_versions``) are relabelled to this version, in the same compare-and-swap
  transaction, once no live process of their version remains, then recovered the same way
  (``fleet.forwarded``). Turns of a version nothing alive runs and this contract cannot replay
  are reported (``fleet.turns_stranded``), never silently left.

Clocks: heartbeats and cut-offs use the database's clock on Postgres (one clock for the whole
fleet), the local clock on SQLite (one machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from ..config import HelixSettings
from ..observability.log import log_event
from ..store.schema import adoptions, executors
from ..store.store import SessionStore
from . import names

__all__ = [
    "ExecutorInfo",
    "Fleet",
    "forward_stranded",
    "list_executors",
    "pending_by_version",
    "workflow_table",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def workflow_table(dialect: str, schema: str = "dbos") -> str:
    """DBOS's ``workflow_status`` table as SQL: schema-qualified on Postgres."""
    return f"{schema}.workflow_status" if dialect == "postgresql" else "workflow_status"


def _now(dialect: str) -> Any:
    """The fleet's clock: the database's on Postgres, this machine's on SQLite."""
    return sa.func.clock_timestamp() if dialect == "postgresql" else datetime.now(UTC)


def _ago(dialect: str, seconds: float) -> Any:
    if dialect == "postgresql":
        return sa.func.clock_timestamp() - timedelta(seconds=seconds)
    return datetime.now(UTC) - timedelta(seconds=seconds)


def _insert(dialect: str) -> Any:
    """An INSERT on ``__agents_executors`` with ON CONFLICT support, for the dialect."""
    return (postgresql if dialect == "postgresql" else sqlite).insert(executors)


def _live(dialect: str, adopt_after: float) -> Any:
    """The condition on ``__agents_executors`` of a live executor."""
    return sa.and_(
        executors.c.stopped_at.is_(None), executors.c.heartbeat_at > _ago(dialect, adopt_after)
    )


@dataclass(frozen=True)
class ExecutorInfo:
    """One executor as the operator sees it (``helix-dbos executors``)."""

    executor_id: str
    application_version: str
    hostname: str | None
    pid: int | None
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    adopted_by: str | None
    adopted_at: datetime | None
    state: str
    """``live``, ``dead`` (silent, not yet adopted), ``stopped`` or ``adopted``."""
    pending: int
    """PENDING turn workflows it owns."""

    def dump(self) -> dict[str, Any]:
        """The JSON form: times in UTC with their offset, one format on both backends."""

        def iso(t: datetime | None) -> str | None:
            return _as_utc(t).astimezone(UTC).isoformat(timespec="microseconds") if t else None

        return {
            "executorId": self.executor_id,
            "applicationVersion": self.application_version,
            "state": self.state,
            "hostname": self.hostname,
            "pid": self.pid,
            "startedAt": iso(self.started_at),
            "heartbeatAt": iso(self.heartbeat_at),
            "stoppedAt": iso(self.stopped_at),
            "adoptedBy": self.adopted_by,
            "adoptedAt": iso(self.adopted_at),
            "pendingTurns": self.pending,
        }


async def _pending_groups(
    conn: AsyncConnection, dialect: str, schema: str
) -> list[tuple[str, str, int]]:
    """``(executor_id, application_version, count)`` of PENDING turn workflows (and ENQUEUED
    ones: a recovery cut short by its process's exit leaves them enqueued for their version)."""
    rows = await conn.execute(
        sa.text(
            f"SELECT executor_id, application_version, COUNT(*) FROM "
            f"{workflow_table(dialect, schema)} WHERE status IN ('PENDING', 'ENQUEUED') "
            "AND name IN (:turn, :continuation) "
            "GROUP BY executor_id, application_version"
        ),
        {"turn": names.TURN_WORKFLOW, "continuation": names.CONTINUE_WORKFLOW},
    )
    return [(r[0] or "", r[1] or "", int(r[2])) for r in rows]


async def _pending_groups_if_any(store: SessionStore) -> list[tuple[str, str, int]]:
    """``_pending_groups``, or none when DBOS has not created its tables here yet."""
    try:
        async with store.engine.connect() as conn:
            return await _pending_groups(conn, store.dialect, "dbos")
    except sa.exc.DBAPIError:
        return []


async def _live_executors(
    conn: AsyncConnection, dialect: str, adopt_after: float
) -> dict[str, str]:
    rows = await conn.execute(
        sa.select(executors.c.executor_id, executors.c.application_version).where(
            _live(dialect, adopt_after)
        )
    )
    return {r[0]: r[1] for r in rows}


async def list_executors(
    store: SessionStore, adopt_after_seconds: float, *, include_gone: bool = False
) -> list[ExecutorInfo]:
    """The executors on the database, live ones first; with ``include_gone`` also those
    stopped or adopted (otherwise only live and dead-not-yet-adopted ones)."""
    dialect = store.dialect
    pending: dict[str, int] = {}
    for executor_id, _version, count in await _pending_groups_if_any(store):
        pending[executor_id] = pending.get(executor_id, 0) + count
    async with store.engine.connect() as conn:
        live = await _live_executors(conn, dialect, adopt_after_seconds)
        rows = (await conn.execute(sa.select(executors))).mappings().all()
    out = []
    for r in rows:
        if r["executor_id"] in live:
            state = "live"
        elif r["adopted_by"] is not None:
            state = "adopted"
        elif r["stopped_at"] is not None:
            state = "stopped"
        else:
            state = "dead"
        waiting = pending.get(r["executor_id"], 0)
        if not include_gone and state in ("stopped", "adopted") and not waiting:
            continue
        fields: dict[str, Any] = {
            k: _as_utc(v) if isinstance(v, datetime) else v for k, v in r.items()
        }
        out.append(ExecutorInfo(**fields, state=state, pending=waiting))
    order = {"live": 0, "dead": 1, "stopped": 2, "adopted": 3}
    out.sort(key=lambda e: (order[e.state], e.executor_id))
    return out


async def pending_by_version(store: SessionStore) -> dict[str, int]:
    """PENDING turn workflows per application version."""
    groups = await _pending_groups_if_any(store)
    counts: dict[str, int] = {}
    for _executor, version, count in groups:
        counts[version] = counts.get(version, 0) + count
    return counts


async def _claim(
    conn: AsyncConnection,
    dialect: str,
    executor_id: str,
    version: str,
    me: str,
    adopt_after: float,
) -> bool:
    """Compare-and-swap the dead executor's row to ``adopted_by = me``; ``True`` if we won.

    An executor with PENDING turns but no row (a release before the fleet existed) gets a
    stopped row first. A claim by an adopter that itself died can be taken over.
    """
    await conn.execute(
        _insert(dialect)
        .values(
            executor_id=executor_id,
            application_version=version,
            started_at=_EPOCH,
            heartbeat_at=_EPOCH,
            stopped_at=_EPOCH,
        )
        .on_conflict_do_nothing(index_elements=["executor_id"])
    )
    live_ids = sa.select(executors.c.executor_id).where(_live(dialect, adopt_after))
    won = await conn.execute(
        executors.update()
        .where(
            executors.c.executor_id == executor_id,
            sa.or_(
                executors.c.stopped_at.is_not(None),
                executors.c.heartbeat_at <= _ago(dialect, adopt_after),
            ),
            sa.or_(
                executors.c.adopted_by.is_(None),
                executors.c.adopted_by == me,
                executors.c.adopted_by.not_in(live_ids.scalar_subquery()),
            ),
        )
        .values(adopted_by=me, adopted_at=_now(dialect))
        .returning(executors.c.executor_id)
    )
    return won.first() is not None


async def _relabel(
    conn: AsyncConnection,
    dialect: str,
    schema: str,
    executor_id: str,
    from_version: str,
    to_version: str,
) -> list[str]:
    """Move one dead executor's PENDING turns of ``from_version`` to ``to_version``.

    One UPDATE: rows another transaction relabelled first no longer match, so each workflow
    moves once.
    """
    rows = await conn.execute(
        sa.text(
            f"UPDATE {workflow_table(dialect, schema)} SET application_version = :to "
            "WHERE status IN ('PENDING', 'ENQUEUED') AND executor_id = :executor "
            "AND application_version = :from RETURNING workflow_uuid"
        ),
        {"to": to_version, "executor": executor_id, "from": from_version},
    )
    return [r[0] for r in rows]


async def forward_stranded(
    store: SessionStore,
    from_version: str,
    to_version: str,
    me: str,
    adopt_after_seconds: float,
    *,
    schema: str = "dbos",
) -> list[str]:
    """Relabel the PENDING turns of ``from_version`` whose executors are dead to
    ``to_version`` (claiming each dead executor); returns the workflow ids moved.

    Live processes of ``to_version`` then adopt them (the relabelled rows belong to dead
    executors of their version). Used by the fleet's sweep and by ``helix-dbos executors
    --forward``, for versions whose recorded turns ``to_version``'s contract replays.
    """
    dialect = store.dialect
    moved: list[str] = []
    async with store.engine.connect() as conn:
        groups = await _pending_groups(conn, dialect, schema)
        live = await _live_executors(conn, dialect, adopt_after_seconds)
    if from_version in live.values():
        return []  # its own live processes adopt their dead peers' turns
    for executor_id, version, _count in groups:
        if version != from_version or executor_id in live:
            continue
        async with store.engine.begin() as conn:
            if await _claim(conn, dialect, executor_id, version, me, adopt_after_seconds):
                ids = await _relabel(conn, dialect, schema, executor_id, version, to_version)
                if ids:
                    await _record(conn, ids, "forwarded", executor_id, version, me, to_version)
                    # The row now speaks for the relabelled turns: of the new version, and
                    # free for any live process of it to adopt.
                    await conn.execute(
                        executors.update()
                        .where(executors.c.executor_id == executor_id)
                        .values(application_version=to_version, adopted_by=None)
                    )
                moved.extend(ids)
    return moved


async def _record(
    conn: AsyncConnection,
    workflow_ids: Iterable[str],
    kind: str,
    from_executor: str,
    from_version: str,
    me: str,
    to_version: str,
) -> None:
    at = datetime.now(UTC)
    rows = [
        {
            "workflow_id": w,
            "kind": kind,
            "from_executor": from_executor,
            "from_version": from_version,
            "adopted_by": me,
            "to_version": to_version,
            "adopted_at": at,
        }
        for w in workflow_ids
    ]
    if rows:
        await conn.execute(adoptions.insert(), rows)


async def adoption_history(
    store: SessionStore, workflow_ids: Iterable[str]
) -> list[dict[str, Any]]:
    """The take-overs of these workflows by live processes, oldest first (for ``inspect``)."""
    ids = sorted(set(workflow_ids))
    if not ids:
        return []
    query = (
        sa.select(adoptions)
        .where(adoptions.c.workflow_id.in_(ids))
        .order_by(adoptions.c.adopted_at, adoptions.c.id)
    )
    async with store.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [
        {
            "workflowId": r.workflow_id,
            "kind": r.kind,
            "fromExecutor": r.from_executor,
            "fromVersion": r.from_version,
            "adoptedBy": r.adopted_by,
            "toVersion": r.to_version,
            "adoptedAt": _as_utc(r.adopted_at).isoformat(),
        }
        for r in rows
    ]


def _as_utc(at: datetime) -> datetime:
    # SQLite hands timestamps back without their zone; they were written in UTC.
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


class Fleet:
    """This process's membership in the fleet: its heartbeat and its sweeps.

    Args:
        settings: the runtime's settings (executor id, version, timings).
        store: the session store (its engine reaches DBOS's tables too: one database).
    """

    def __init__(self, settings: HelixSettings, store: SessionStore) -> None:
        self.settings = settings
        self.store = store
        self.me = settings.executor_id
        self.version = settings.application_version
        self.schema = str(settings.extra_dbos_config.get("dbos_system_schema", "dbos"))
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._stranded_reported: dict[str, int] = {}
        self._live: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self._first_sweep: asyncio.Future[int | None] | None = None

    @property
    def dialect(self) -> str:
        return self.store.dialect

    # -- membership ---------------------------------------------------------------------------

    async def register(self) -> None:
        """Record this executor (live from now); a reused id of a live process is logged."""
        dialect = self.dialect
        async with self.store.engine.begin() as conn:
            before = (
                await conn.execute(
                    sa.select(executors.c.pid, executors.c.hostname).where(
                        executors.c.executor_id == self.me,
                        _live(dialect, self.settings.adopt_after_seconds),
                    )
                )
            ).first()
            if before is not None and (before.pid, before.hostname) != (
                os.getpid(),
                socket.gethostname(),
            ):
                # A restart with a stable id within the liveness window, or two processes
                # configured with one id (which DBOS cannot tell apart): say so loudly.
                log_event(
                    "fleet.executor_id_reused",
                    executorId=self.me,
                    previousPid=before.pid,
                    previousHost=before.hostname,
                )
            values = {
                "application_version": self.version,
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "started_at": _now(dialect),
                "heartbeat_at": _now(dialect),
                "stopped_at": None,
                "adopted_by": None,
                "adopted_at": None,
            }
            await conn.execute(
                _insert(dialect)
                .values(executor_id=self.me, **values)
                .on_conflict_do_update(index_elements=["executor_id"], set_=values)
            )
        log_event("fleet.joined", executorId=self.me, applicationVersion=self.version)

    def start(self) -> None:
        """Start heartbeating and sweeping (after DBOS is launched)."""
        loop = asyncio.get_running_loop()
        self._first_sweep = loop.create_future()
        self._task = loop.create_task(self._loop(), name="helix-fleet")

    async def first_sweep(self, timeout: float) -> int | None:
        """How many dead executors' turns the first sweep after ``start`` adopted; ``None``
        when it failed or did not end within ``timeout`` seconds (what it adopts later is
        logged as ``fleet.adopted`` all the same)."""
        if self._first_sweep is None:
            return None
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(asyncio.shield(self._first_sweep), timeout)
        return None

    def _swept(self, adopted: int | None) -> None:
        if self._first_sweep is not None and not self._first_sweep.done():
            self._first_sweep.set_result(adopted)

    async def pause(self) -> None:
        """Stop heartbeating and sweeping (at shutdown, before DBOS is destroyed): a process
        on its way out must not adopt turns it would leave half-recovered."""
        if self._task is not None:
            # Let a beat in progress finish its transaction (a task cancelled inside one can
            # leave its connection holding a lock); cancel only if it does not end in time.
            self._stopping.set()
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=10)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            self._task = None

    async def stop(self) -> None:
        """Stop the loop and mark this executor stopped: its parked turns are adoptable now."""
        await self.pause()
        async with self.store.engine.begin() as conn:
            await conn.execute(
                executors.update()
                .where(executors.c.executor_id == self.me)
                .values(stopped_at=_now(self.dialect))
            )

    async def _loop(self) -> None:
        period = self.settings.heartbeat_seconds
        while not self._stopping.is_set():
            try:
                await self.heartbeat()
                self._swept(len(await self.sweep()))  # the launch reports the first one
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the next beat tries again; a database blip is not fatal
                self._swept(None)
                log_event("fleet.sweep_failed", executorId=self.me, error=f"{exc!r}"[:500])
            # Jitter: processes started together do not sweep in lockstep.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._stopping.wait(), timeout=period * random.uniform(0.8, 1.0)
                )

    async def heartbeat(self) -> None:
        """Record that this process is alive (and notice if it was given up for dead)."""
        async with self.store.engine.begin() as conn:
            row = (
                await conn.execute(
                    executors.update()
                    .where(executors.c.executor_id == self.me)
                    .values(heartbeat_at=_now(self.dialect), stopped_at=None)
                    .returning(executors.c.adopted_by)
                )
            ).first()
        if row is None:
            await self.register()
        elif row[0] is not None:
            # We were silent for longer than adopt_after_seconds and another process adopted
            # our turns: its runs own them now (DBOS fences our stale executions).
            log_event("fleet.executor_reclaimed", executorId=self.me, adoptedBy=row[0])
            async with self.store.engine.begin() as conn:
                await conn.execute(
                    executors.update()
                    .where(executors.c.executor_id == self.me)
                    .values(adopted_by=None, adopted_at=None)
                )

    # -- sweeping -----------------------------------------------------------------------------

    async def sweep(self) -> list[str]:
        """Adopt dead executors' turns, move replayable versions forward, report stranded
        ones; returns the workflow ids taken over by this process."""
        async with self._lock:
            dialect = self.dialect
            after = self.settings.adopt_after_seconds
            async with self.store.engine.connect() as conn:
                groups = await _pending_groups(conn, dialect, self.schema)
                self._live = live = await _live_executors(conn, dialect, after)
            live_versions = set(live.values()) | {self.version}
            taken: list[str] = []
            stranded: dict[str, int] = {}
            forward = self.settings.forward_versions or frozenset()
            for executor_id, version, count in groups:
                if executor_id == self.me or executor_id in live:
                    continue
                if version == self.version:
                    taken += await self.adopt(executor_id)
                elif version in live_versions:
                    continue  # a live process of that version adopts it
                elif version in forward:
                    taken += await self._forward(version)
                else:
                    stranded[version] = stranded.get(version, 0) + count
            self._report_stranded(stranded)
            return taken

    async def adopt(self, executor_id: str) -> list[str]:
        """Claim a dead executor and recover its PENDING workflows of our version through
        DBOS; ``[]`` when another process won the claim (or it is not dead)."""
        from dbos import DBOS

        async with self.store.engine.begin() as conn:
            won = await _claim(
                conn,
                self.dialect,
                executor_id,
                self.version,
                self.me,
                self.settings.adopt_after_seconds,
            )
        if not won:
            return []
        handles = await asyncio.to_thread(DBOS._recover_pending_workflows, [executor_id])
        ids = [h.get_workflow_id() for h in handles]
        async with self.store.engine.begin() as conn:
            await _record(conn, ids, "adopted", executor_id, self.version, self.me, self.version)
        if ids:
            log_event(
                "fleet.adopted",
                executorId=self.me,
                fromExecutor=executor_id,
                applicationVersion=self.version,
                count=len(ids),
                workflowIds=ids[:20],
            )
        return ids

    async def _forward(self, version: str) -> list[str]:
        moved = await forward_stranded(
            self.store,
            version,
            self.version,
            self.me,
            self.settings.adopt_after_seconds,
            schema=self.schema,
        )
        if moved:
            log_event(
                "fleet.forwarded",
                executorId=self.me,
                fromVersion=version,
                toVersion=self.version,
                count=len(moved),
                workflowIds=moved[:20],
            )
        # They are now dead executors' turns of our version: adopt them at once.
        executors_of = await self._executors_of(moved)
        taken: list[str] = []
        for executor_id in executors_of:
            taken += await self.adopt(executor_id)
        return taken

    async def _executors_of(self, workflow_ids: list[str]) -> set[str]:
        if not workflow_ids:
            return set()
        async with self.store.engine.connect() as conn:
            rows = await conn.execute(
                sa.text(
                    f"SELECT DISTINCT executor_id FROM {workflow_table(self.dialect, self.schema)}"
                    " WHERE workflow_uuid IN :ids"
                ).bindparams(sa.bindparam("ids", expanding=True)),
                {"ids": workflow_ids},
            )
            return {r[0] for r in rows}

    def _report_stranded(self, stranded: dict[str, int]) -> None:
        for version, count in stranded.items():
            if self._stranded_reported.get(version) == count:
                continue  # once per change, not once per beat
            log_event(
                "fleet.turns_stranded",
                executorId=self.me,
                applicationVersion=version,
                currentVersion=self.version,
                count=count,
                command=f"helix-dbos executors --forward {version}",
            )
        self._stranded_reported = stranded

    # -- a submit's promise ---------------------------------------------------------------------

    async def ensure_runner(self, session_id: str) -> bool:
        """Make sure something will run the continuation of ``session_id``'s turn; ``False``
        if nothing can (its version is not this contract's and no process of it is alive).

        A turn of this version whose executor is dead is adopted now (not at the next sweep);
        one of a replayable version with no live process is moved forward now. The common
        case (the turn's executor is alive) costs one query.
        """
        dialect = self.dialect
        async with self.store.engine.connect() as conn:
            # Reads only: no BEGIN/ROLLBACK round trips around them (a cross-process submit
            # waits on this before it answers).
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            row = (
                await conn.execute(
                    sa.text(
                        "SELECT w.workflow_uuid, w.status, w.executor_id, w.application_version "
                        f"FROM __agents_states s JOIN {workflow_table(dialect, self.schema)} w "
                        "ON w.workflow_uuid = s.workflow_id WHERE s.session_id = :sid"
                    ),
                    {"sid": session_id},
                )
            ).first()
            if row is None or row[1] not in ("PENDING", "ENQUEUED"):
                return True  # no turn, or it has ended: nothing is promised
            workflow_id, status, executor_id, version = row
            if executor_id == self.me and version == self.version:
                return True
            live = self._live
            if executor_id not in live:
                # Not live when the last sweep looked: ask again before acting on it.
                live = await _live_executors(conn, dialect, self.settings.adopt_after_seconds)
        if version == self.version:
            if status == "PENDING" and executor_id not in live:
                await self.adopt(executor_id)
            return True
        if version in live.values():
            return True
        if version in (self.settings.forward_versions or frozenset()):
            await self._forward(version)
            return True
        log_event(
            "fleet.turn_stranded",
            workflowId=workflow_id,
            applicationVersion=version,
            currentVersion=self.version,
            command=f"helix-dbos executors --forward {version}",
        )
        return False
