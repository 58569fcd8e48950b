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
* **Only agents it runs.** A dead executor whose turns run an agent this process does not
  define is left to one that does (``fleet.adoption_skipped``, once, names the agents).
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
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ...config import HelixSettings
from ...core.jitter import jitter
from ...observability.log import log_event
from ...store import SessionStore, reuse_event
from .. import names

__all__ = [
    "ExecutorInfo",
    "Fleet",
    "forward_stranded",
    "list_executors",
    "pending_by_version",
]

#: The workflows the fleet counts, adopts and moves forward: turns and their continuations.
_TURNS = (names.TURN_WORKFLOW, names.CONTINUE_WORKFLOW)


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


async def list_executors(
    store: SessionStore, adopt_after_seconds: float, *, include_gone: bool = False
) -> list[ExecutorInfo]:
    """The executors on the database, live ones first; with ``include_gone`` also those
    stopped or adopted (otherwise only live and dead-not-yet-adopted ones)."""
    pending: dict[str, int] = {}
    for executor_id, _version, count in await store.dbos.pending_groups_if_any(_TURNS):
        pending[executor_id] = pending.get(executor_id, 0) + count
    async with store.reading():
        live = await store.fleet.live_executors(adopt_after_seconds)
        rows = await store.fleet.executor_rows()
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
    groups = await store.dbos.pending_groups_if_any(_TURNS)
    counts: dict[str, int] = {}
    for _executor, version, count in groups:
        counts[version] = counts.get(version, 0) + count
    return counts


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
    moved: list[str] = []
    async with store.reading():
        groups = await store.dbos.pending_groups(schema, _TURNS)
        live = await store.fleet.live_executors(adopt_after_seconds)
    if from_version in live.values():
        return []  # its own live processes adopt their dead peers' turns
    for executor_id, version, _count in groups:
        if version != from_version or executor_id in live:
            continue
        async with store.writing():
            claimed = await store.fleet.claim(executor_id, version, me, adopt_after_seconds)
            if claimed:
                ids = await store.dbos.relabel(schema, executor_id, version, to_version)
                if ids:
                    await store.fleet.record(ids, "forwarded", executor_id, version, me, to_version)
                    await store.fleet.hand_over(executor_id, to_version)
                moved.extend(ids)
    return moved


async def adoption_history(
    store: SessionStore, workflow_ids: Iterable[str]
) -> list[dict[str, Any]]:
    """The take-overs of these workflows by live processes, oldest first (for ``inspect``)."""
    ids = sorted(set(workflow_ids))
    if not ids:
        return []
    async with store.reading():
        rows = await store.fleet.adoptions_of(ids)
    return [
        {
            "workflowId": r["workflow_id"],
            "kind": r["kind"],
            "fromExecutor": r["from_executor"],
            "fromVersion": r["from_version"],
            "adoptedBy": r["adopted_by"],
            "toVersion": r["to_version"],
            "adoptedAt": _as_utc(r["adopted_at"]).isoformat(),
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
        agents: the agent types this process runs; ``None``: any (a fleet of one app).
    """

    def __init__(
        self, settings: HelixSettings, store: SessionStore, agents: Iterable[str] | None = None
    ) -> None:
        self.settings = settings
        self.store = store
        self.agents = None if agents is None else frozenset(agents)
        self._skipped_reported: dict[str, frozenset[str]] = {}
        self.me = settings.executor_id
        self.version = settings.application_version
        self.schema = str(settings.extra_dbos_config.get("dbos_system_schema", "dbos"))
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._stranded_reported: dict[str, int] = {}
        self._live: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self._first_sweep: asyncio.Future[int | None] | None = None

    # -- membership ---------------------------------------------------------------------------

    async def register(self) -> None:
        """Record this executor (live from now); a reused id of a live process is logged."""
        async with self.store.writing():
            before = await self.store.fleet.live_identity(
                self.me, self.settings.adopt_after_seconds
            )
            if before is not None and before != (os.getpid(), socket.gethostname()):
                # Two processes configured with one id (which DBOS cannot tell apart): say so
                # loudly; a restart whose predecessor is gone from this host is only noted.
                log_event(
                    reuse_event(*before),
                    executorId=self.me,
                    previousPid=before[0],
                    previousHost=before[1],
                )
            await self.store.fleet.upsert_executor(
                self.me, self.version, socket.gethostname(), os.getpid()
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
        """Stop the loop and mark this executor stopped: its parked turns are adoptable now.

        The mark only hastens adoption: a process whose mark could not be written (a database
        down or locked at shutdown) is judged dead once its heartbeat is older than
        ``adopt_after_seconds``, and its turns adopted then. So a failed mark is logged
        (``fleet.stop_mark_failed``), never raised: the shutdown goes on and closes the store.
        """
        await self.pause()
        try:
            async with self.store.writing():
                await self.store.fleet.mark_stopped(self.me)
        except Exception as exc:
            log_event(
                "fleet.stop_mark_failed",
                executorId=self.me,
                error=f"{type(exc).__name__}: {exc}",
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
                    self._stopping.wait(), timeout=period * jitter.uniform(0.8, 1.0)
                )

    async def heartbeat(self) -> None:
        """Record that this process is alive (and notice if it was given up for dead)."""
        async with self.store.writing():
            found, adopted_by = await self.store.fleet.beat(self.me)
        if not found:
            await self.register()
        elif adopted_by is not None:
            # We were silent for longer than adopt_after_seconds and another process adopted
            # our turns: its runs own them now (DBOS fences our stale executions).
            log_event("fleet.executor_reclaimed", executorId=self.me, adoptedBy=adopted_by)
            async with self.store.writing():
                await self.store.fleet.clear_adoption(self.me)

    # -- sweeping -----------------------------------------------------------------------------

    async def sweep(self) -> list[str]:
        """Adopt dead executors' turns, move replayable versions forward, report stranded
        ones; returns the workflow ids taken over by this process."""
        async with self._lock:
            after = self.settings.adopt_after_seconds
            async with self.store.reading():
                groups = await self.store.dbos.pending_groups(self.schema, _TURNS)
                self._live = live = await self.store.fleet.live_executors(after)
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

        if not await self._runs_every_agent_of(executor_id):
            return []
        async with self.store.writing():
            won = await self.store.fleet.claim(
                executor_id,
                self.version,
                self.me,
                self.settings.adopt_after_seconds,
            )
        if not won:
            return []
        handles = await asyncio.to_thread(DBOS._recover_pending_workflows, [executor_id])
        ids = [h.get_workflow_id() for h in handles]
        async with self.store.writing():
            await self.store.fleet.record(
                ids, "adopted", executor_id, self.version, self.me, self.version
            )
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

    async def _runs_every_agent_of(self, executor: str) -> bool:
        """Whether this process defines every agent whose turns ``executor`` left; if not,
        ``fleet.adoption_skipped`` says which (once per executor and set of agents)."""
        if self.agents is None:
            return True
        async with self.store.reading():
            found = await self.store.dbos.pending_agent_types(self.schema, executor, _TURNS)
        undefined = frozenset(found - self.agents)
        if undefined and self._skipped_reported.get(executor) != undefined:
            self._skipped_reported[executor] = undefined
            log_event(
                "fleet.adoption_skipped",
                executorId=self.me,
                fromExecutor=executor,
                agents=sorted(undefined),
                hint="left for a process that defines these agents",
            )
        return not undefined

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
        async with self.store.reading():
            return await self.store.dbos.executors_of(self.schema, workflow_ids)

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
        # Reads only, in autocommit mode: a cross-process submit waits on this before it answers.
        async with self.store.reading():
            row = await self.store.dbos.session_turn(self.schema, session_id)
            if row is None or row[1] not in ("PENDING", "ENQUEUED"):
                return True  # no turn, or it has ended: nothing is promised
            workflow_id, status, executor_id, version = row
            if executor_id == self.me and version == self.version:
                return True
            live = self._live
            if executor_id not in live:
                # Not live when the last sweep looked: ask again before acting on it.
                live = await self.store.fleet.live_executors(self.settings.adopt_after_seconds)
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
