"""``AgentRuntime``: the one entry point to start, submit, resume, interrupt and inspect turns.

The work of its methods lives in modules of its own: the launch and the shutdown in
``lifetime.py``, the entries in ``entering.py``, the reads in ``reads.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Literal

from ..config import HelixSettings
from ..core.agents import Agent, AgentRegistry
from ..core.approval_policy import Decider
from ..core.clock import now_ms
from ..core.events import SessionEvent
from ..core.messages import Message
from ..core.owner import SessionOwner, checked_owner
from ..core.session import Continuation, SessionState, SubmitAnswer, batch_of, unanswered
from ..errors import AgentNotResumableError, RequestValidationError
from ..observability.approval_metrics import ApprovalMetrics
from ..store.approvals import APPROVALS_PAGE_DEFAULT, ApprovalPage
from ..store.store import SessionStore
from . import context, entering, lifecycle, lifetime, names, reads, records
from .companions import end_companions
from .control import stash_entry, stop_tree, tree_of
from .fleet import Fleet
from .handle import TurnHandle
from .heal import Repair, heal
from .keeper import DeadlineKeeper
from .lifetime import RELEASE_WAIT_SECONDS as RELEASE_WAIT_SECONDS
from .notifications import NotificationHooks, Notifications
from .notify import EventSignals
from .startup import StartupFacts
from .submit import MISSING, Submission, submit

__all__ = ["AgentRuntime", "TurnHandle"]

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
        return lifetime.dbos_config(self.settings)

    async def launch(self) -> None:
        """Migrate (or check) the session tables, launch DBOS, and recover parked turns."""
        await lifetime.launch(self)

    async def heal(self, grace_seconds: float | None = None) -> list[Repair]:
        """Run one reconciliation pass now (the background task runs them periodically)."""
        grace = self.settings.heal_grace_seconds if grace_seconds is None else grace_seconds
        return await heal(self.ctx, grace_seconds=grace)

    async def shutdown(self, grace_seconds: float = 2.0) -> None:
        """Destroy DBOS and close the store. Parked turns stay durable and recover later.

        Turns that are between steps (not parked) get ``grace_seconds`` to reach their next
        park or their end, so a clean shutdown does not leave them to crash recovery.
        """
        await lifetime.shutdown(self, grace_seconds)

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
        (``entering.enter``)."""
        return await entering.enter(self, session_id, agent_type, message, new=new, owner=owner)

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

    # -- retry, rewind, checkpoints (lifecycle.py) --------------------------------------------

    async def retry(
        self, session_id: str, message: str | None = None, checkpoint_id: str | None = None
    ) -> TurnHandle:
        """Re-run a failed or interrupted turn as a new run (the rules: docs/lifecycle.md).

        Raises:
            AgentAlreadyRunningError: a turn is running or parked: nothing to retry.
            AgentNotResumableError: the session completed (or never ran): nothing to retry.
            RequestValidationError: the failed run committed steps and no message was given
                (``cause: message``); or nothing after ``checkpoint_id`` is user input.
            SessionNotFoundError: no such session or checkpoint.
        """
        state = await self.store.get(session_id)
        await lifecycle.precheck(state, "retry")
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
        await lifecycle.require_checkpoint(session_id, checkpoint_id)
        if state.status == "suspended_client_tool":
            await self.interrupt(session_id)
            state = await self.store.get(session_id)
        await lifecycle.precheck(state, "rewind")
        return await self._lifecycle(session_id, "rewind", None, checkpoint_id)

    async def _lifecycle(
        self,
        session_id: str,
        op: lifecycle.Op,
        message: str | None,
        checkpoint_id: str | None,
    ) -> TurnHandle:
        run_id = records.new_run_id()
        workflow_id, workflow = await lifecycle.start_lifecycle(
            session_id, run_id, op, message, checkpoint_id
        )
        self._remember(workflow_id, workflow)
        return TurnHandle(session_id, run_id, workflow_id, workflow)

    async def checkpoints(self, session_id: str) -> list[dict[str, Any]]:
        """The session's checkpoints, newest first: ``{checkpointId, runId, step, createdAt,
        messageCount, kind}``; any one is a point ``rewind`` and ``retry`` can go back to."""
        return await lifecycle.checkpoints_of(self.store, session_id)

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
