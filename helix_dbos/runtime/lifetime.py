"""A runtime's lifetime: the launch sequence (tables, DBOS, fleet, background tasks) and the
shutdown that undoes it, leaving parked turns durable for the next process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dbos import DBOS, DBOSClient

from ..config import HelixSettings
from ..observability.approval_metrics import activate, deactivate
from ..observability.log import log_event, set_service_name
from ..store.migrate import head_revision, require_current_schema, upgrade
from ..store.store import SessionStore
from . import context
from .fleet import Fleet
from .heal import heal_forever
from .keeper import DeadlineKeeper
from .startup import count_recoverable, log_started, startup_facts

if TYPE_CHECKING:
    from .runtime import AgentRuntime

__all__ = ["RELEASE_WAIT_SECONDS", "dbos_config", "launch", "shutdown"]

RELEASE_WAIT_SECONDS = 5.0
"""How long a shutdown waits for the workflow tasks it cancelled to unwind."""


class _DropCancelledWarnings(logging.Filter):
    """Drops DBOS's warning that a workflow's asyncio task was cancelled."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Asyncio task cancelled for workflow")


@contextlib.contextmanager
def _quiet_dbos_cancellations() -> Iterator[None]:
    """Within the block, DBOS does not log each workflow task a shutdown cancels."""
    dbos_logger, drop = logging.getLogger("dbos"), _DropCancelledWarnings()
    dbos_logger.addFilter(drop)
    try:
        yield
    finally:
        dbos_logger.removeFilter(drop)


def dbos_config(s: HelixSettings) -> dict[str, Any]:
    """The DBOS configuration: pinned executor id and version, our system database."""
    urls = s.urls
    config: dict[str, Any] = {
        "name": s.app_name,
        "system_database_url": urls.dbos,
        "application_version": s.application_version,
        "executor_id": s.executor_id,
        "log_level": s.dbos_log_level,
        "max_executor_threads": s.max_executor_threads,
        # A role without DDL rights only verifies DBOS's schema (`dbos migrate` made it).
        "run_migrations": s.run_migrations,
    }
    if urls.is_sqlite:
        config["notification_listener_polling_interval_sec"] = s.sqlite_poll_seconds
    else:
        # No liveness round trip on every checkout of DBOS's pool: it was a fifth of a
        # continuation's CPU. A connection a database restart dropped fails its statement
        # instead; SQLAlchemy then drops the whole pool and DBOS retries the operation
        # (``tests/faults``). ``extra_dbos_config`` may set other engine arguments.
        config["db_engine_kwargs"] = {"pool_pre_ping": False, "pool_recycle": 1800}
    config.update(s.extra_dbos_config)
    return config


async def launch(rt: AgentRuntime) -> None:
    """Migrate (or check) the session tables, launch DBOS, and recover parked turns."""
    s = rt.settings
    if s.run_migrations:
        revision = await asyncio.to_thread(upgrade, s.database_url)
    else:
        await asyncio.to_thread(require_current_schema, s.database_url)
        revision = head_revision()  # the check passed: the tables are at the head
    if rt.service_name:
        set_service_name(rt.service_name)
    store = SessionStore.from_url(s.database_url, max_state_bytes=s.store_max_state_bytes)
    store.on_events = rt.signals.wake
    DBOS(config=rt.dbos_config())  # type: ignore[arg-type]
    ctx = rt._ctx = context.RuntimeContext(
        settings=s,
        registry=rt.registry,
        store=store,
        scrubber=rt.scrubber,
        client=DBOSClient(system_database_url=s.urls.dbos, lazy=True),
        notes=rt.notifications,
    )
    fleet = rt.fleet = ctx.fleet = Fleet(s, store)
    await fleet.register()
    # Recovery at launch replays parked turns, which look the context up: install first.
    context.install(ctx)
    activate(rt.metrics)
    recovering = await count_recoverable(store, s, fleet.schema)
    DBOS.launch()
    fleet.start()
    reminders = any(t.remind_before is not None for a in rt.registry for t in a.tools)
    rt.notifications.start(store, reminders=reminders)
    # The first sweep adopts dead executors' turns: wait for it (a heartbeat at most) so
    # the startup line says how many came back either way.
    adopted = await fleet.first_sweep(s.heartbeat_seconds)
    rt.startup = startup_facts(s, rt.registry, revision, recovering, adopted, rt.startup_fields)
    log_started(rt.startup)
    rt._keeper = DeadlineKeeper(ctx, s.deadline_keeper_seconds)
    rt._keeper.start()
    if s.heal_interval_seconds > 0:
        rt._healing = asyncio.Event()
        rt._healer = asyncio.create_task(
            heal_forever(ctx, s.heal_interval_seconds, s.heal_grace_seconds, rt._healing)
        )


async def shutdown(rt: AgentRuntime, grace_seconds: float) -> None:
    """Stop the background tasks, let running turns reach a park, release the parked ones,
    destroy DBOS and close the store."""
    await _stop_background(rt)
    if rt.fleet is not None:
        await rt.fleet.pause()
    await _drain(rt, grace_seconds)
    if rt._ctx is not None:
        await _release_workflows(rt._ctx)
    await rt.signals.close()
    for agent in rt.registry:
        await agent.close_toolsets()  # an MCP server's connection, its subprocess
    DBOS.destroy(destroy_registry=False)
    if rt.fleet is not None:
        # After destroy: from here on our parked turns are adoptable at once.
        await rt.fleet.stop()
        rt.fleet = None
    if rt._ctx is not None:
        await rt._ctx.store.close()
    context.uninstall()
    deactivate(rt.metrics)
    rt._ctx = None


async def _stop_background(rt: AgentRuntime) -> None:
    """Stop the reconciler, the deadline keeper and the notification dispatcher."""
    if rt._healer is not None:
        # The pass in progress finishes (a task cancelled mid-transaction could leave
        # its connection holding a lock); a pass stuck on a dead database is cancelled.
        rt._healing.set()
        try:
            await asyncio.wait_for(asyncio.shield(rt._healer), timeout=10)
        except (TimeoutError, asyncio.CancelledError):
            rt._healer.cancel()
        rt._healer = None
    if rt._keeper is not None:
        await rt._keeper.stop()
        rt._keeper = None
    await rt.notifications.stop()


async def _drain(rt: AgentRuntime, grace_seconds: float) -> None:
    """Wait up to ``grace_seconds`` for this runtime's turns between steps (not parked) to
    reach their next park or their end; then forget the finished ones."""
    parked = rt._ctx.parked if rt._ctx is not None else set()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_seconds
    while loop.time() < deadline:
        busy = [wid for wid, task in rt._started.items() if not task.done() and wid not in parked]
        if not busy:
            break
        await asyncio.sleep(0.01)
    rt._started = {w: t for w, t in rt._started.items() if not t.done()}


async def _release_workflows(ctx: context.RuntimeContext) -> None:
    """Cancel this runtime's workflow tasks still running after the drain (the parked).

    Each stays ``PENDING`` in DBOS (a cancelled task records nothing) and recovers in the
    next process of this executor, or is adopted. Left running, they would outlive the
    event loop; the garbage collector then closes each coroutine mid-await, and its
    error handling would run with no loop to run on (or, with another runtime launched
    in this process since, against that runtime's store).
    """
    ctx.handovers.close_all()  # first steps of turns that never ran here
    running = [task for task in ctx.workflows if not task.done()]
    if running:
        # DBOS warns once per cancelled workflow; a deploy with thousands parked says it
        # once.
        with _quiet_dbos_cancellations():
            for task in running:
                task.cancel()
            _, unfinished = await asyncio.wait(running, timeout=RELEASE_WAIT_SECONDS)
        log_event("runtime.workflows_released", count=len(running), unfinished=len(unfinished))
    # After the turns, which let go of what they had taken (``BatchJobs.forget``).
    await ctx.batch_jobs.close_all(RELEASE_WAIT_SECONDS)
