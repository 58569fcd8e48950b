"""The operator's handle on a deployment, from outside any running runtime.

``helix-dbos sessions / inspect / fail-call / interrupt`` (and any tool of yours) open an
:class:`Operator` on a database URL. It reads sessions through the store and the DBOS status of
their turns through DBOS's public client, and it fails a stuck call or interrupts a session
through the runtime's own code (``submit`` and ``stop_tree``) with that client as the
messenger. It registers no agents and launches no DBOS, so it never starts, recovers or runs a
workflow: the parked turns (in whatever process runs them) react to what it sends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from dbos import DBOSClient

from ...config import HelixSettings, parse_database_url
from ...core.agents import AgentRegistry
from ...core.approval_policy import Decider
from ...core.session import SessionState, SubmitAnswer
from ...store import ListedSession, SessionStore, recent_sessions, require_current_schema
from .._context import RuntimeContext
from .._operations.control import stop_tree
from .._operations.fleet import (
    ExecutorInfo,
    adoption_history,
    forward_stranded,
    list_executors,
    pending_by_version,
)
from .._operations.heal import Repair, heal
from .._operations.retry import checkpoints_of
from .._submit.answer import Submission, submit

__all__ = ["FAIL_CALL_DEFAULT_ERROR", "Operator", "WorkflowInfo"]

#: The error a failed call carries unless the operator gives one.
FAIL_CALL_DEFAULT_ERROR = "manually_failed_by_operator"


@dataclass(frozen=True)
class WorkflowInfo:
    """A turn's DBOS workflow, as DBOS reports it."""

    workflow_id: str
    status: str
    executor_id: str | None
    application_version: str | None
    recovery_attempts: int
    created_at: int | None
    """Epoch milliseconds."""
    updated_at: int | None
    """Epoch milliseconds."""


class Operator:
    """Read sessions and their turns' workflows; fail a call; interrupt a session.

    Open one with ``async with Operator.open(database_url) as op:``.
    """

    def __init__(self, store: SessionStore, client: Any, settings: HelixSettings) -> None:
        self.store = store
        self.settings = settings
        self._client = client
        # A context for a process that runs no turns: no agents (an error submit needs no tool
        # definition), and every wake-up or cancel goes through the DBOS client.
        self._ctx = RuntimeContext(
            settings=settings,
            registry=AgentRegistry(),
            store=store,
            client=client,
            messenger=client,
        )

    @classmethod
    @asynccontextmanager
    async def open(cls, database_url: str, *, pool_size: int = 2) -> AsyncIterator[Operator]:
        """An operator on ``database_url``; closes its connections on exit.

        Raises:
            ConfigError: the URL is not a supported database URL.
            SchemaNotCurrentError: the session tables are missing or behind (run
                ``helix-dbos migrate``).
        """
        urls = parse_database_url(database_url)
        await asyncio.to_thread(require_current_schema, database_url)
        store = SessionStore.from_url(database_url, pool_size=pool_size)
        # Lazy: reads that never touch DBOS never connect to its tables; no retry loop, so an
        # unreachable database is an error, not a wait.
        client = DBOSClient(system_database_url=urls.dbos, lazy=True, retry_connection_errors=False)
        try:
            yield cls(store, client, HelixSettings.from_env(database_url=database_url))
        finally:
            client.destroy()
            await store.close()

    # -- reading ----------------------------------------------------------------------------

    async def session(self, session_id: str) -> SessionState:
        """The session's row.

        Raises:
            SessionNotFoundError: no such session.
        """
        return await self.store.get(session_id)

    async def sessions(
        self, *, status: str | None = None, agent_type: str | None = None, limit: int = 20
    ) -> list[ListedSession]:
        """The most recently updated sessions, newest first."""
        return await recent_sessions(self.store, status=status, agent_type=agent_type, limit=limit)

    async def tree(self, session_id: str) -> list[SessionState]:
        """The session's whole tree from its root: the root first, parents before children."""
        session = await self.store.get(session_id)
        root = session if session.is_root else await self.store.get(session.root_session_id)
        return [root, *await self.store.descendants(root.session_id)]

    async def workflows(self, workflow_ids: Iterable[str]) -> dict[str, WorkflowInfo]:
        """DBOS's status of each workflow that exists (none before DBOS has made its tables)."""
        ids = sorted(set(workflow_ids))
        if not ids:
            return {}
        try:
            found = await self._client.list_workflows_async(
                workflow_ids=ids, load_input=False, load_output=False
            )
        except Exception:  # no DBOS system tables here yet: nothing to show
            return {}
        return {
            w.workflow_id: WorkflowInfo(
                workflow_id=w.workflow_id,
                status=str(w.status),
                executor_id=w.executor_id,
                application_version=w.app_version,
                recovery_attempts=int(w.recovery_attempts or 0),
                created_at=w.created_at,
                updated_at=w.updated_at,
            )
            for w in found
        }

    async def checkpoints(self, session_id: str) -> list[dict[str, Any]]:
        """The session's checkpoints, newest first, as ``AgentRuntime.checkpoints`` lists them.

        Raises:
            SessionNotFoundError: no such session.
        """
        return await checkpoints_of(self.store, session_id)

    async def executors(self, *, include_gone: bool = False) -> list[ExecutorInfo]:
        """The processes on this database, live ones first (``helix-dbos executors``); with
        ``include_gone`` also those stopped or adopted."""
        return await list_executors(
            self.store, self.settings.adopt_after_seconds, include_gone=include_gone
        )

    async def pending_by_version(self) -> dict[str, int]:
        """The turn workflows DBOS holds PENDING, counted by application version."""
        return await pending_by_version(self.store)

    async def adoptions(self, workflow_ids: Iterable[str]) -> list[dict[str, Any]]:
        """The take-overs of these workflows by live processes, oldest first."""
        return await adoption_history(self.store, workflow_ids)

    # -- acting -----------------------------------------------------------------------------

    async def forward_stranded(self, from_version: str) -> list[str]:
        """Relabel the PENDING turns of ``from_version`` whose processes are dead to this
        release's version (``settings.application_version``), for the live fleet to adopt;
        the workflow ids moved."""
        settings = self.settings
        return await forward_stranded(
            self.store,
            from_version,
            settings.application_version,
            f"cli-{settings.executor_id}",
            settings.adopt_after_seconds,
        )

    async def fail_call(
        self, session_id: str, tool_call_id: str, error: str = FAIL_CALL_DEFAULT_ERROR
    ) -> tuple[str, SubmitAnswer]:
        """Fail a pending call with ``error`` through the normal submit path, on the root.

        Returns ``(root session id, the submit's answer)``: ``accepted`` (the turn continues),
        ``already_completed``, or ``unknown_tool_call``.
        """
        state = await self.store.get(session_id)
        answer = await submit(
            self._ctx,
            Submission(session_id=state.root_session_id, tool_call_id=tool_call_id, error=error),
        )
        return state.root_session_id, answer

    async def answer_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approval_id: str,
        *,
        approved: bool,
        reason: str | None,
        principal: str,
    ) -> SubmitAnswer:
        """Approve or deny a pending approval through the normal submit path, on the root,
        as ``principal`` with the operator's credential (``operator_cli``): the approval's
        policy holds (four eyes, its quorum), and the decision record names the operator."""
        return await submit(
            self._ctx,
            Submission(
                session_id=session_id,
                tool_call_id=tool_call_id,
                kind="approval-response",
                approval_id=approval_id,
                approved=approved,
                reason=reason,
                decider=Decider(principal=principal, credential="operator_cli"),
            ),
        )

    async def heal(self, grace_seconds: float) -> list[Repair]:
        """One reconciliation pass (``helix-dbos heal``). No agents here: a claimed turn with no
        workflow is ended typed, not started (a running server's reconciler starts it)."""
        return await heal(self._ctx, grace_seconds=grace_seconds, can_start=False)

    async def interrupt(self, session_id: str) -> tuple[str, SessionState]:
        """Interrupt the session and its sub-agents, as ``AgentRuntime.interrupt`` does.

        Returns ``(status before, the session after)``.
        """
        before = await self.store.get(session_id)
        after = await stop_tree(self._ctx, session_id, abort=False, reason=None)
        return before.status, after
