"""The dispatcher: one task per launched runtime that delivers the outbox's due events.

Each pass claims the due events (``outbox.claim``: a lease, so no other dispatcher takes them
meanwhile, and one more attempt counted), then calls their hooks, concurrently, and settles
each: delivered, or due again after a backoff (``notification.hook_failed``), or given up
after ``max_attempts`` (``notification.gave_up``). A crash anywhere leaves the event queued:
the next dispatcher to find it due (this process restarted, or another process of the fleet)
delivers it again. So every event is delivered at least once.

A reminder (``deadline_near``) is also a log line (``client_tool.deadline_near``) and a stream
event (``tool_deadline_near``). Both come from its first claim, in the claiming transaction,
and only while the call still waits: two dispatchers never both claim it first, so the stream
gets it once; a call answered (or expired) before its reminder was due gets none.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import TYPE_CHECKING, Any

from ...core.clock import now_ms
from ...core.events import event
from ...core.jitter import jitter
from ...core.session import SessionState
from ...observability.log import log_event
from ...store import (
    OutboxRow,
    SessionStore,
    outbox_any_due,
    outbox_claim,
    outbox_deliver,
    outbox_give_up,
    outbox_purge,
    outbox_retry,
    outbox_skip,
)
from .._commits.opening import ACTIVE_STATUSES
from .hooks import Notification

if TYPE_CHECKING:
    from .hooks import Hook, Notifications

__all__ = ["Dispatcher", "notification_of", "still_waiting"]

#: How often settled events older than the retention are deleted.
PURGE_EVERY_SECONDS = 60.0
#: How long a shutdown waits for the pass in progress.
STOP_WAIT_SECONDS = 5.0


def notification_of(row: OutboxRow) -> Notification:
    """The hooks' view of an outbox row."""
    data = dict(row.payload)
    return Notification(
        kind=row.kind,  # type: ignore[arg-type]  # one of notes.KINDS, as written
        key=row.event_key,
        session_id=row.session_id,
        root_session_id=row.root_session_id,
        run_id=row.run_id,
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        call_kind=str(data.get("callKind", "client")),
        deadline_at=int(data.get("deadlineAt") or 0),
        at=row.created_at,
        attempt=row.attempts,
        approval_id=data.get("approvalId"),
        outcome=data.get("outcome"),
        on_timeout=data.get("onTimeout"),
        input=data.get("input"),
        decider=data.get("decider"),
        data=data,
    )


def still_waiting(state: SessionState | None, row: OutboxRow, at: int) -> bool:
    """Whether the call of ``row`` is still parked, unanswered, before its deadline."""
    if state is None or state.status not in ACTIVE_STATUSES:
        return False
    entry = state.pending.get(row.tool_call_id)
    return (
        entry is not None
        and entry.run_id == row.run_id
        and entry.submitted_at is None
        and not entry.lapsed_by(at)
    )


class Dispatcher:
    """Delivers the due events of one store to one runtime's hooks."""

    def __init__(self, store: SessionStore, hooks: Notifications) -> None:
        self.store = store
        self.hooks = hooks
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._woken = asyncio.Event()
        self._purged_at = 0

    # -- life -------------------------------------------------------------------------------

    def start(self) -> None:
        """Run the delivery loop (once; a second call changes nothing)."""
        if self._task is None or self._task.done():
            self._stopping = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="helix-notifications"
            )

    def wake(self) -> None:
        """Look for due events now."""
        self._woken.set()

    async def stop(self) -> None:
        """Let the pass in progress end (a bounded wait), then stop."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        self._woken.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), STOP_WAIT_SECONDS)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        while not self._stopping.is_set():
            self._woken.clear()
            claimed = 0
            try:
                claimed = await self.deliver_due()
                await self._purge()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is away, say: the next pass tries again
                log_event("notification.dispatch_failed", error=f"{exc!r}"[:300])
            if claimed >= self.hooks.options.batch_size:
                continue  # more may be due already
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), self.hooks.options.poll_seconds)

    # -- one pass ---------------------------------------------------------------------------

    async def deliver_due(self) -> int:
        """Claim the due events, tell their hooks, settle them; how many were claimed."""
        options = self.hooks.options
        at = now_ms()
        kinds = self.hooks.kinds | {"deadline_near"}  # a reminder is a stream event anyway
        if not await outbox_any_due(self.store, now=at, kinds=kinds):
            return 0  # nothing due: no transaction at all

        async def body() -> tuple[list[OutboxRow], list[OutboxRow], int]:
            rows = await outbox_claim(
                now=at,
                lease_until=at + int(options.lease * 1000),
                kinds=kinds,
                limit=options.batch_size,
            )
            to_deliver, reminded = [], []
            for row in rows:
                if row.kind == "deadline_near" and row.attempts == 1:
                    if not await self._remind(row, at):
                        await outbox_skip(self.store, row.id, at)
                        continue
                    reminded.append(row)
                elif await self._stale_escalation(row, at):
                    # An approval answered (or ended) before its escalation: nothing to tell.
                    await outbox_skip(self.store, row.id, at)
                    continue
                if not self.hooks.hooks_for(row.kind):
                    await outbox_deliver(self.store, row.id, at)  # nobody to tell
                    continue
                to_deliver.append(row)
            return to_deliver, reminded, len(rows)

        to_deliver, reminded, claimed = await self.store.transact(body)
        for row in reminded:
            log_event(
                "client_tool.deadline_near",
                sessionId=row.session_id,
                runId=row.run_id,
                toolCallId=row.tool_call_id,
                toolName=row.tool_name,
                kind=row.payload.get("callKind"),
                deadlineAt=row.payload.get("deadlineAt"),
                remindBefore=row.payload.get("remindBefore"),
            )
        if to_deliver:
            done = await asyncio.gather(
                *(self._deliver(row) for row in to_deliver), return_exceptions=True
            )
            for failed in (d for d in done if isinstance(d, BaseException)):
                # A settlement that could not be written: the row's lease runs out and the
                # event is delivered again.
                log_event("notification.dispatch_failed", error=f"{failed!r}"[:300])
        return claimed

    async def _stale_escalation(self, row: OutboxRow, at: int) -> bool:
        """Whether ``row`` is an escalation, claimed the first time, of a call that no longer
        waits."""
        if row.kind != "escalated" or row.attempts != 1:
            return False
        return not still_waiting(await self.store.load(row.session_id), row, at)

    async def _remind(self, row: OutboxRow, at: int) -> bool:
        """The reminder's stream event, if the call still waits; whether it does."""
        state = await self.store.load(row.session_id)
        if not still_waiting(state, row, at):
            return False
        data: dict[str, Any] = {
            "toolCallId": row.tool_call_id,
            "toolName": row.tool_name,
            "kind": row.payload.get("callKind"),
            "deadlineAt": row.payload.get("deadlineAt"),
            "remindBefore": row.payload.get("remindBefore"),
        }
        if row.payload.get("approvalId") is not None:
            data["approvalId"] = row.payload["approvalId"]
        await self.store.append_events(
            row.session_id, row.run_id, [event("tool_deadline_near", **data)]
        )
        return True

    async def _deliver(self, row: OutboxRow) -> None:
        """Call the row's hooks; settle it, or schedule its retry."""
        note = notification_of(row)
        try:
            for hook in self.hooks.hooks_for(row.kind):
                await self._call(hook, note)
        except Exception as exc:
            await self._failed(row, f"{type(exc).__name__}: {exc}"[:500])
            return
        await outbox_deliver(self.store, row.id, now_ms())
        log_event("notification.delivered", kind=row.kind, key=row.event_key, attempt=row.attempts)

    async def _call(self, hook: Hook, note: Notification) -> None:
        async def run() -> None:
            value = hook(note)
            if inspect.isawaitable(value):
                await value

        await asyncio.wait_for(run(), self.hooks.options.hook_timeout_seconds)

    async def _failed(self, row: OutboxRow, error: str) -> None:
        options = self.hooks.options
        fields = {
            "kind": row.kind,
            "key": row.event_key,
            "sessionId": row.session_id,
            "toolCallId": row.tool_call_id,
            "attempt": row.attempts,
            "error": error,
        }
        if row.attempts >= options.max_attempts:
            await outbox_give_up(self.store, row.id, now_ms(), error)
            log_event("notification.gave_up", **fields)
            return
        delay = min(options.retry_max_seconds, options.retry_base_seconds * 2 ** (row.attempts - 1))
        delay *= jitter.uniform(0.8, 1.0)  # processes that failed together retry apart
        await outbox_retry(self.store, row.id, now_ms() + int(delay * 1000), error)
        log_event("notification.hook_failed", **fields, retryInSeconds=round(delay, 3))

    async def _purge(self) -> None:
        at = now_ms()
        if at - self._purged_at < PURGE_EVERY_SECONDS * 1000:
            return
        self._purged_at = at
        await outbox_purge(self.store, at - int(self.hooks.options.retention_seconds * 1000))
