"""``AgentRuntime``: the one entry point to start, submit, resume, interrupt and inspect turns.

Its launch sequence (tables, DBOS, fleet, background tasks) and the shutdown that undoes it,
leaving parked turns durable for the next process, are ``_launch`` and ``_shutdown``; its
entries (claim a session for a new run, commit its entry and start its turn workflow: a new
session's, an existing session's next turn, a persistent session's message) are ``_enter``;
the reads are in ``_facade/reads.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from dbos import DBOS, DBOSClient, SetWorkflowID

from ...config import HelixSettings
from ...core.agents import Agent, AgentRegistry
from ...core.approval_policy import Decider
from ...core.clock import now_ms
from ...core.events import SessionEvent
from ...core.messages import Message
from ...core.owner import SessionOwner, checked_owner
from ...core.session import Continuation, SessionState, SubmitAnswer, batch_of, unanswered
from ...errors import AgentAlreadyRunningError, AgentNotResumableError, RequestValidationError
from ...observability.approval_metrics import ApprovalMetrics, activate, deactivate
from ...observability.log import log_event, set_service_name
from ...store import (
    APPROVALS_PAGE_DEFAULT,
    ApprovalPage,
    IntegrityError,
    Retention,
    RetentionSweeper,
    SessionStore,
    head_revision,
    require_current_schema,
    upgrade,
)
from .. import _context as context
from .. import names, records
from .._commits.opening import open_turn
from .._companions import persistent
from .._companions.sends import end_companions
from .._handover import EntryInputs
from .._hibernated.keeper import DeadlineKeeper
from .._notifications.dispatcher import Dispatcher
from .._notifications.hooks import NotificationHooks, Notifications
from .._operations import retry as retry_ops
from .._operations.control import stash_entry, stop_tree, tree_of
from .._operations.fleet import Fleet
from .._operations.heal import Repair, heal, heal_forever
from .._submit.answer import MISSING, Submission, precheck, submit
from .._turn.first_model_step import start_first_step
from .._turn.workflow import run_turn
from . import reads
from .event_signals import EventSignals
from .startup import StartupFacts, count_recoverable, log_started, startup_facts
from .turn_handle import TurnHandle

__all__ = ["AgentRuntime", "TurnHandle"]

RELEASE_WAIT_SECONDS = 5.0
"""How long a shutdown waits for the workflow tasks it cancelled to unwind."""

#: The least a launch waits for its first adoption sweep before it logs ``runtime.started``.
FIRST_SWEEP_WAIT_SECONDS = 5.0


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


def _dbos_config(s: HelixSettings) -> dict[str, Any]:
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


async def _launch(rt: AgentRuntime) -> None:
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
    fleet = rt.fleet = ctx.fleet = Fleet(s, store, agents=[a.name for a in rt.registry])
    await fleet.register()
    # Recovery at launch replays parked turns, which look the context up: install first.
    context.install(ctx)
    activate(rt.metrics)
    recovering = await count_recoverable(store, s, fleet.schema)
    DBOS.launch()
    fleet.start()
    reminders = any(t.remind_before is not None for a in rt.registry for t in a.tools)
    rt.notifications.start(Dispatcher(store, rt.notifications), reminders=reminders)
    # The first sweep adopts dead executors' turns: wait for it so the startup line says how
    # many came back. It takes milliseconds on a healthy start; the bound is a heartbeat but
    # never under FIRST_SWEEP_WAIT_SECONDS, as a short heartbeat on a busy host timed it out.
    adopted = await fleet.first_sweep(max(s.heartbeat_seconds, FIRST_SWEEP_WAIT_SECONDS))
    rt.startup = startup_facts(s, rt.registry, revision, recovering, adopted, rt.startup_fields)
    log_started(rt.startup)
    rt._keeper = DeadlineKeeper(ctx, s.deadline_keeper_seconds)
    rt._keeper.start()
    persistent_agents = frozenset(a.name for a in rt.registry if a.persistent)
    decisions = s.decision_retention_days
    retention = Retention(
        s.retention_seconds,
        dict(s.retention_by_agent),
        persistent_agents,
        decisions=None if decisions is None else decisions * 86_400,
    )
    schema = str(s.extra_dbos_config.get("dbos_system_schema", "dbos"))
    rt._sweeper = RetentionSweeper(store, retention, s.retention_sweep_seconds, schema)
    rt._sweeper.start()
    if s.heal_interval_seconds > 0:
        rt._healing = asyncio.Event()
        rt._healer = asyncio.create_task(
            heal_forever(ctx, s.heal_interval_seconds, s.heal_grace_seconds, rt._healing)
        )


async def _shutdown(rt: AgentRuntime, grace_seconds: float) -> None:
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
    if rt._sweeper is not None:
        await rt._sweeper.stop()
        rt._sweeper = None
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


async def _enter(
    rt: AgentRuntime,
    session_id: str,
    agent_type: str,
    message: str | None,
    *,
    new: bool = False,
    owner: SessionOwner | None = None,
) -> TurnHandle:
    """Claim the session for a new run, commit its entry and start its turn.

    ``new``: the caller made the session id up (``start`` without one): see
    ``_enter_new``. ``owner``: recorded if the session is created.
    """
    turn_id = records.new_run_id()
    if rt.registry.get(agent_type).persistent:
        return await _enter_persistent(rt, session_id, agent_type, message, turn_id, owner)
    if new:
        return await _enter_new(rt, session_id, agent_type, message, turn_id, owner)
    entry = await _open(rt, session_id, agent_type, message, turn_id, new=False, owner=owner)
    # The claim is committed; a crash before the workflow below starts leaves it without a
    # workflow, and the reconciler (``heal``) starts that workflow under the same id. The
    # workflow starts only now: a refused claim (the session is busy) leaves none behind.
    # The first model step starts from the entry alongside DBOS's start, as in
    # ``_enter_new``.
    state = entry.state
    workflow_id = names.turn_workflow_id(session_id, turn_id)
    rt.ctx.handovers.open(workflow_id).set_result(
        start_first_step(
            workflow_id, session_id, turn_id, state.agent_type, state.root_session_id, entry
        )
    )
    try:
        workflow = await _start_turn(
            workflow_id, session_id, turn_id, state.agent_type, state.root_session_id
        )
    except BaseException:
        rt.ctx.handovers.close(workflow_id)  # stops the first step too
        raise
    rt._remember(workflow_id, workflow)
    return TurnHandle(session_id, turn_id, workflow_id, workflow)


async def _open(
    rt: AgentRuntime,
    session_id: str,
    agent_type: str,
    message: str | None,
    turn_id: str,
    *,
    new: bool,
    owner: SessionOwner | None = None,
) -> EntryInputs:
    """Commit the entry of ``turn_id`` (``entry.open_turn``)."""
    try:
        return await rt.store.transact(
            lambda: open_turn(
                rt.store,
                session_id=session_id,
                agent_type=agent_type,
                turn_id=turn_id,
                message=message,
                new=new,
                owner=owner,
            )
        )
    except IntegrityError:
        # Two starts raced to create the same new session: the other one won.
        raise AgentAlreadyRunningError(
            f"Session {session_id!r} already has a turn running", sessionId=session_id
        ) from None


async def _enter_new(
    rt: AgentRuntime,
    session_id: str,
    agent_type: str,
    message: str | None,
    turn_id: str,
    owner: SessionOwner | None = None,
) -> TurnHandle:
    """A new session's first turn: its entry commits while DBOS starts its workflow.

    Each one's round trips overlap the other's. Once the entry has committed, the turn's
    first model step starts from it, still alongside DBOS's start, and the turn takes
    the running step (``handover.py``). A crash between them is repaired either way: a
    claim without its workflow is started by the reconciler (``heal``), and its turn
    finds the first step's answer recorded, or runs the step; a workflow without its
    entry finds no session and ends, writing nothing.
    """
    workflow_id = names.turn_workflow_id(session_id, turn_id)
    handover = rt.ctx.handovers.open(workflow_id)
    starting = asyncio.ensure_future(
        _start_turn(workflow_id, session_id, turn_id, agent_type, session_id)
    )
    try:
        entry = await _open(rt, session_id, agent_type, message, turn_id, new=True, owner=owner)
    except BaseException:
        handover.set_result(None)  # the turn ends at once
        # Not awaited: with the database down, DBOS's start waits for it to come back,
        # and the caller must get the entry's error now.
        starting.add_done_callback(lambda done: _started_without_entry(rt, workflow_id, done))
        raise
    handover.set_result(
        start_first_step(workflow_id, session_id, turn_id, agent_type, session_id, entry)
    )
    try:
        workflow = await starting
    except BaseException:
        rt.ctx.handovers.close(workflow_id)  # stops the first step too
        raise
    rt._remember(workflow_id, workflow)
    return TurnHandle(session_id, turn_id, workflow_id, workflow)


def _started_without_entry(
    rt: AgentRuntime, workflow_id: str, starting: asyncio.Future[Any]
) -> None:
    """A turn started for an entry that failed (it ends at once when it runs): kept for
    the shutdown's grace wait like any turn; a start that failed is only logged."""
    if not starting.cancelled() and starting.exception() is None:
        rt._remember(workflow_id, starting.result())
        return
    rt.ctx.handovers.close(workflow_id)
    error = "cancelled" if starting.cancelled() else type(starting.exception()).__name__
    log_event("turn.start_failed", workflowId=workflow_id, error=error)


async def _enter_persistent(
    rt: AgentRuntime,
    session_id: str,
    agent_type: str,
    message: str | None,
    turn_id: str,
    owner: SessionOwner | None = None,
) -> TurnHandle:
    """A persistent session's message: to its live workflow's inbox, or a new workflow."""
    entered = await persistent.deliver(
        rt.ctx, session_id, agent_type, message, turn_id, owner=owner
    )
    rt._remember(entered.workflow_id, entered.workflow)
    if entered.delivery == "delivered" and rt.fleet is not None:
        # The live workflow's process may be gone: adopt it now, not at the next sweep.
        await rt.fleet.ensure_runner(session_id)
    return TurnHandle(
        session_id,
        turn_id,
        entered.workflow_id,
        persistent.TurnResult(entered.workflow_id, turn_id, session_id),
        delivery=entered.delivery,
    )


async def _start_turn(
    workflow_id: str, session_id: str, turn_id: str, agent_type: str, root_session_id: str
) -> Any:
    """Start the turn workflow of a new run."""
    with SetWorkflowID(workflow_id):
        return await DBOS.start_workflow_async(
            run_turn, session_id, turn_id, agent_type, root_session_id, layout=names.TURN_LAYOUT
        )


_TERMINAL = reads.TERMINAL
_FIRST_SWEEP = 64
"""How many started workflows the runtime keeps before it first sweeps out finished ones."""


class AgentRuntime(NotificationHooks):
    """The durable agent runtime of one process.

    Args:
        agents: the agents it serves (found by name; sub-agents are registered too).
        settings: configuration; defaults to ``HelixSettings.from_env()``.
        scrubber: optional ``str -> str`` applied to submitted error strings (and denial
            reasons) before they are stored, streamed, logged or shown to the model.
        service_name: tags every log event with ``service``.
    """

    def __init__(
        self,
        agents: Iterable[Agent],
        settings: HelixSettings | None = None,
        *,
        scrubber: Callable[[str], str] | None = None,
        service_name: str | None = None,
    ) -> None:
        self.settings = settings or HelixSettings.from_env()
        self.registry = AgentRegistry(agents)
        self.scrubber = scrubber
        self.service_name = service_name
        self._ctx: context.RuntimeContext | None = None
        self._healer: asyncio.Task[None] | None = None
        self._keeper: DeadlineKeeper | None = None
        self._sweeper: RetentionSweeper | None = None
        self._healing = asyncio.Event()
        self._started: dict[str, Any] = {}
        """Turn workflows started by this process: workflow id -> its in-process future."""
        self._sweep_started_at = _FIRST_SWEEP
        self.fleet: Fleet | None = None
        """This process's executor in the fleet (after ``launch``)."""
        self.signals = EventSignals(self.settings.urls)
        """Wakes event streams when their session's events commit (one LISTEN connection)."""
        self.startup_fields: dict[str, Any] = {}
        """More fields for the ``runtime.started`` line (the HTTP router adds ``auth``)."""
        self.startup: StartupFacts | None = None
        """What ``launch`` logged as ``runtime.started`` (after ``launch``)."""
        self.notifications = Notifications()
        """The notification hooks (``on_pending`` ...) and their delivery (docs/approvals.md)."""
        self.metrics = ApprovalMetrics()
        """The live Prometheus metrics, in a registry of this runtime's own (``live_metrics``;
        replace before ``launch`` to register them elsewhere)."""

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def max_result_bytes(self) -> int:
        """The submit size limit; hosts read it, never configure it twice."""
        return self.settings.max_result_bytes

    @property
    def store(self) -> SessionStore:
        """The session store (after ``launch``)."""
        return self.ctx.store

    @property
    def ctx(self) -> context.RuntimeContext:
        if self._ctx is None:
            raise RuntimeError("The runtime is not launched: call `await runtime.launch()`")
        return self._ctx

    def dbos_config(self) -> dict[str, Any]:
        """The DBOS configuration: pinned executor id and version, our system database."""
        return _dbos_config(self.settings)

    async def launch(self) -> None:
        """Migrate (or check) the session tables, launch DBOS, and recover parked turns."""
        await _launch(self)

    async def heal(self, grace_seconds: float | None = None) -> list[Repair]:
        """Run one reconciliation pass now (the background task runs them periodically)."""
        grace = self.settings.heal_grace_seconds if grace_seconds is None else grace_seconds
        return await heal(self.ctx, grace_seconds=grace)

    async def shutdown(self, grace_seconds: float = 2.0) -> None:
        """Destroy DBOS and close the store. Parked turns stay durable and recover later.

        Turns that are between steps (not parked) get ``grace_seconds`` to reach their next
        park or their end, so a clean shutdown does not leave them to crash recovery.
        """
        await _shutdown(self, grace_seconds)

    def _remember(self, workflow_id: str, workflow: Any) -> None:
        """Keep a started workflow's in-process task for the shutdown's grace wait.

        Finished ones are swept when the map has doubled since the last sweep, not at every
        start: with thousands of turns parked, a sweep per start made starting quadratic.
        """
        task = getattr(workflow, "task", None)
        if task is None:
            return
        if len(self._started) >= self._sweep_started_at:
            self._started = {w: t for w, t in self._started.items() if not t.done()}
            self._sweep_started_at = max(_FIRST_SWEEP, 2 * len(self._started))
        self._started[workflow_id] = task

    async def __aenter__(self) -> AgentRuntime:
        await self.launch()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- entries ----------------------------------------------------------------------------

    async def start(
        self,
        agent_type: str,
        message: str,
        session_id: str | None = None,
        *,
        principal: str | None = None,
        tenant: str | None = None,
    ) -> TurnHandle:
        """Start a turn: a new session, or the next turn of an idle/ended session.

        ``principal`` and ``tenant``: who starts the session, recorded on a NEW session (and
        inherited by its sub-agents); the next turn of an existing session keeps its owner.

        Raises:
            AgentNotFoundError: no such agent.
            AgentAlreadyRunningError: the session has a turn running (retryable) or parked
                (not retryable; ``waitingFor`` and ``awaitedToolCallIds`` name the calls).
        """
        self.registry.get(agent_type)
        owner = SessionOwner(checked_owner(principal, "principal"), checked_owner(tenant, "tenant"))
        sid = session_id or records.new_session_id()
        return await self._enter(sid, agent_type, message, new=session_id is None, owner=owner)

    async def _enter(
        self,
        session_id: str,
        agent_type: str,
        message: str | None,
        *,
        new: bool = False,
        owner: SessionOwner | None = None,
    ) -> TurnHandle:
        """Claim the session for a new run, commit its entry and start its turn
        (``_enter``)."""
        return await _enter(self, session_id, agent_type, message, new=new, owner=owner)

    async def resume(
        self,
        session_id: str,
        mode: Literal["continue", "with_message", "from_checkpoint"] = "continue",
        message: str | None = None,
        abandon_pending: bool = False,
        checkpoint_id: str | None = None,
    ) -> TurnHandle:
        """Resume a session.

        ``continue`` continues a complete batch (on DBOS the parked turn already does; this
        adopts it) and is refused on a partial batch with a retryable ``state_not_resumable``.
        ``with_message`` delivers a new message over pending calls: with ``abandon_pending``
        every unanswered call gets ``client_tool_abandoned``, stored answers are kept, the
        results are committed before the message, and one model call runs. On an interrupted
        session it starts the next turn. Completed and failed sessions are refused.
        ``from_checkpoint`` rewinds to ``checkpoint_id`` (see ``rewind``).
        """
        if mode == "from_checkpoint":
            if checkpoint_id is None or message is not None or abandon_pending:
                raise RequestValidationError(
                    "mode 'from_checkpoint' takes a checkpointId and nothing else",
                    cause="checkpoint_id",
                )
            return await self.rewind(session_id, checkpoint_id)
        state = await self.store.get(session_id)
        if mode == "with_message" and message is None:
            raise RequestValidationError("mode 'with_message' needs a message", cause="message")
        if state.status in ("completed", "failed"):
            raise AgentNotResumableError(
                f"Session {session_id!r} is {state.status}; send the next message with start()",
                sessionId=session_id,
                status=state.status,
            )
        if state.status == "interrupted" or state.status == "idle":
            if mode == "continue":
                raise AgentNotResumableError(
                    f"Session {session_id!r} is {state.status}: nothing to continue",
                    sessionId=session_id,
                    status=state.status,
                )
            return await self._enter(session_id, state.agent_type, message)
        if mode == "with_message":
            assert message is not None
            run_id = await stash_entry(self.ctx, state, message, abandon_pending)
            return TurnHandle(session_id, run_id, state.workflow_id)
        return await self._continue(state)

    async def _continue(self, root: SessionState) -> TurnHandle:
        at = now_ms()
        for state in await tree_of(self.ctx, root.session_id):
            awaited = [
                p.tool_call_id
                for p in unanswered(batch_of(state.pending, state.run_id or ""))
                if not p.lapsed_by(at)
            ]
            if awaited:
                raise AgentNotResumableError(
                    f"The batch is partial: still awaiting {', '.join(awaited)}",
                    sessionId=root.session_id,
                    awaitedToolCallIds=awaited,
                    retryable=True,
                )
        run_id = root.run_id or ""
        if root.status == "suspended_client_tool" and root.pending:
            run_id = names.next_run_id(run_id)
        return TurnHandle(root.session_id, run_id, root.workflow_id)

    # -- retry, rewind, checkpoints (retry.py) --------------------------------------------

    async def retry(
        self, session_id: str, message: str | None = None, checkpoint_id: str | None = None
    ) -> TurnHandle:
        """Re-run a failed or interrupted turn as a new run (the rules: docs/retry.md).

        Raises:
            AgentAlreadyRunningError: a turn is running or parked: nothing to retry.
            AgentNotResumableError: the session completed (or never ran): nothing to retry.
            RequestValidationError: the failed run committed steps and no message was given
                (``cause: message``); or nothing after ``checkpoint_id`` is user input.
            SessionNotFoundError: no such session or checkpoint.
        """
        state = await self.store.get(session_id)
        await retry_ops.precheck(state, "retry")
        return await self._lifecycle(session_id, "retry", message, checkpoint_id)

    async def rewind(self, session_id: str, checkpoint_id: str) -> TurnHandle:
        """Take the session back to a checkpoint; a new run continues from there.

        Later messages leave the conversation (kept for audit). A parked turn is interrupted
        first; calls the rewind discards answer ``unknown_tool_call``. A restored batch that
        is still unanswered is taken over by the new run, which suspends on it at once.

        Raises:
            AgentAlreadyRunningError: a turn is running (between parks): interrupt it first.
            SessionNotFoundError: no such session or checkpoint.
            RequestValidationError: the checkpoint's batch calls sub-agents.
        """
        state = await self.store.get(session_id)
        await retry_ops.require_checkpoint(session_id, checkpoint_id)
        if state.status == "suspended_client_tool":
            await self.interrupt(session_id)
            state = await self.store.get(session_id)
        await retry_ops.precheck(state, "rewind")
        return await self._lifecycle(session_id, "rewind", None, checkpoint_id)

    async def _lifecycle(
        self,
        session_id: str,
        op: retry_ops.Op,
        message: str | None,
        checkpoint_id: str | None,
    ) -> TurnHandle:
        run_id = records.new_run_id()
        workflow_id, workflow = await retry_ops.start_lifecycle(
            session_id, run_id, op, message, checkpoint_id
        )
        self._remember(workflow_id, workflow)
        return TurnHandle(session_id, run_id, workflow_id, workflow)

    async def checkpoints(self, session_id: str) -> list[dict[str, Any]]:
        """The session's checkpoints, newest first: ``{checkpointId, runId, step, createdAt,
        messageCount, kind}``; any one is a point ``rewind`` and ``retry`` can go back to."""
        return await retry_ops.checkpoints_of(self.store, session_id)

    async def precheck_submit(self, sub: Submission) -> None:
        """Check one answer of a request as ``submit_tool_result`` would, storing nothing: a
        host with several answers in one request checks each before it stores any.

        Raises:
            the refusals of ``submit_tool_result``.
        """
        await precheck(self.ctx, sub)

    async def submit_tool_result(
        self,
        session_id: str,
        tool_call_id: str,
        *,
        result: Any = MISSING,
        error: str | None = None,
        kind: Literal["client-tool-result", "approval-response"] = "client-tool-result",
        approval_id: str | None = None,
        approved: bool | None = None,
        reason: str | None = None,
        edited_input: dict[str, Any] | None = None,
        shown_input: dict[str, Any] | None = None,
        decider: Decider | None = None,
    ) -> SubmitAnswer:
        """Submit a client tool's result or error, or an approval decision, on the ROOT session.

        ``decider``: who decides an approval, as your authentication established it (its
        principal, tenant, credential and roles): checked against the tool's approval policy
        and kept in the decision record. Default: the in-process API, with no principal.

        Returns ``accepted`` / ``already_completed`` (each with its continuation; an approval
        counted towards a quorum: ``accepted`` with ``awaiting_quorum``) or
        ``unknown_tool_call`` (with ``reason`` ``run_stopped`` after a stop).

        Raises:
            PayloadTooLargeError: the result is over ``max_result_bytes``; nothing stored.
            InvalidResultError: the result fails the tool's output schema; nothing stored.
            ApprovalMismatchError: a forged approval (wrong id or other arguments).
            RunSupersededError: the call's run was superseded; nothing written.
            RequestValidationError: neither or both of result and error, or a wrong kind.
            ApprovalForbiddenError: the approval's policy refuses this decider (403).
        """
        answer = await submit(
            self.ctx,
            Submission(
                session_id=session_id,
                tool_call_id=tool_call_id,
                kind=kind,
                result=result,
                error=error,
                approval_id=approval_id,
                approved=approved,
                reason=reason,
                edited_input=edited_input,
                shown_input=shown_input,
                decider=decider,
            ),
        )
        return await self._kept(session_id, answer)

    async def _kept(self, session_id: str, answer: SubmitAnswer) -> SubmitAnswer:
        """Never promise a continuation nothing will run: when the turn's process is dead,
        adopt it now; when no process can run it (another contract, none of its processes
        alive), answer ``caller_resumes`` (the answer is stored; see docs/fleet.md)."""
        cont = answer.continuation
        if answer.status == "unknown_tool_call" or cont is None or cont.kind != "new_run":
            return answer
        if answer.continued_here or answer.owner_workflow_id in self.ctx.parked:
            return answer  # parked or continued in this very process: it runs here
        if self.fleet is None or await self.fleet.ensure_runner(session_id):
            return answer
        return answer.model_copy(update={"continuation": Continuation(kind="caller_resumes")})

    async def interrupt(self, session_id: str) -> SessionState:
        """Stop the session's turn and every sub-agent below it; it ends ``interrupted``."""
        return await stop_tree(self.ctx, session_id, abort=False, reason=None)

    async def abort(self, session_id: str, reason: str | None = None) -> SessionState:
        """Stop like ``interrupt``, but the session ends ``failed`` with ``framework_cancelled``
        (and its companions end: docs/companions.md)."""
        top = await stop_tree(self.ctx, session_id, abort=True, reason=reason)
        await end_companions(self.ctx, session_id, reason or "its parent was aborted")
        return top

    # -- reading ----------------------------------------------------------------------------

    async def session(self, session_id: str) -> SessionState:
        """The session's row."""
        return await self.store.get(session_id)

    async def messages(self, session_id: str) -> list[Message]:
        """The session's conversation."""
        return await self.store.load_messages(session_id)

    async def events(
        self, session_id: str, after: int = 0, limit: int = 1000
    ) -> list[SessionEvent]:
        """The session's events after sequence ``after``."""
        return await self.store.read_events(session_id, after, limit)

    async def status(self, session_id: str) -> dict[str, Any]:
        """The seed's status view: ``{sessionId, status, runId, pendingToolCalls, waitingFor,
        error?}``.

        Pending calls of sub-agents are listed on the root (the client submits there), and a
        root waiting on a parked sub-agent reads ``suspended_client_tool``. ``waitingFor``
        tells the waits apart: the kinds of the calls still unanswered (``approval``,
        ``client_tool``), ``[]`` when none is.
        """
        return await reads.status_view(self.ctx, session_id)

    async def approvals(
        self,
        *,
        tool: str | None = None,
        session_id: str | None = None,
        principal: str | None = None,
        tenant: str | None = None,
        older_than: float | None = None,
        deadline_before: int | None = None,
        limit: int = APPROVALS_PAGE_DEFAULT,
        cursor: str | None = None,
        viewer: str | None = None,
    ) -> ApprovalPage:
        """The approval inbox: approvals waiting for a human across sessions, oldest first.

        Every filter given must hold: ``tool``; ``session_id`` (the session that raised the
        call, or its root); ``principal`` and ``tenant`` (the session's owner); ``older_than``
        (waited at least that many seconds); ``deadline_before`` (expires before that time,
        epoch ms). A page holds at most ``limit`` approvals; pass its ``next_cursor`` as
        ``cursor`` for the next page. Answer one with ``submit_tool_result`` on its
        ``root_session_id`` (kind ``approval-response`` with its ``approval_id``). ``viewer``:
        the principal who asks; approvals four eyes bar it from deciding are left out.

        Raises:
            RequestValidationError: a limit outside 1..500, a negative duration, a cursor
                this inbox did not give out.
        """
        return await reads.approval_page(
            self.store,
            tool=tool,
            session_id=session_id,
            principal=principal,
            tenant=tenant,
            older_than=older_than,
            deadline_before=deadline_before,
            limit=limit,
            cursor=cursor,
            viewer=viewer,
        )

    async def wait(
        self,
        session_id: str,
        *,
        until: Iterable[str] = _TERMINAL,
        timeout: float = 30.0,
        interval: float = 0.02,
    ) -> dict[str, Any]:
        """Poll ``status`` until it is one of ``until``; returns the status view.

        Raises:
            TimeoutError: the status did not arrive within ``timeout`` seconds.
        """
        return await reads.wait_for_status(self.status, session_id, until, timeout, interval)

    async def wait_for_pending(
        self, session_id: str, count: int = 1, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Poll until at least ``count`` unanswered pending calls exist; returns them."""
        return await reads.wait_for_pending(self.status, session_id, count, timeout)
