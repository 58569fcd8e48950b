"""Serving a session's durable event stream as Server-Sent Events.

Each stored event is one frame: ``id: <sequence>`` and ``data: <event JSON>`` (its ``type`` is
inside the JSON, so a browser's ``EventSource.onmessage`` sees every event). A client resumes
with ``Last-Event-ID`` (sent automatically by ``EventSource``) or ``?fromSequence=N`` and gets
exactly the events after the point it names: the store's sequence is gap-free and ordered, so
there is no loss and no repetition.

The stream reads the store when the session's events commit (on Postgres a NOTIFY wakes it:
one listening connection per process, ``runtime.signals``; an idle stream runs no query) and
ends when there is nothing more to wait for: the turn has ended, or it is parked on calls that
have no answer yet. On SQLite it polls the store every ``POLL_SECONDS``. Every state change
commits in the same transaction as its events, and the status is read before the last events
read, so an empty read after such a status means the client has everything. Attaching costs
one status view (the route reads it for its 404, and it serves the ``pending`` frame and the
first end check) and one events read; each wake-up reads the new events first.

An open stream rides out a short database outage: a transient fault while polling is retried
with backoff (keep-alives continue) for up to ``STORE_WAIT_SECONDS``. Past that the stream
ends with an SSE ``retry:`` hint and no event, and the client resumes from its last event id
(an ``EventSource`` does so by itself).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from ..core.clock import now_ms
from ..core.events import SessionEvent
from ..errors import StoreUnavailableError
from ..runtime import AgentRuntime, records
from ..store.faults import is_transient
from .errors import end_on_outage, store_unavailable
from .frames import KEEP_ALIVE, frame

__all__ = ["POLL_SECONDS", "STORE_WAIT_SECONDS", "event_stream", "follow_events", "frame"]

#: How often an open stream polls the store for new events (SQLite, or no NOTIFY listener).
POLL_SECONDS = 0.05
#: A comment frame keeps idle connections (and proxies) from timing out.
HEARTBEAT_SECONDS = 15.0
#: How long an open stream waits for an unreachable store before it ends.
STORE_WAIT_SECONDS = 30.0
#: The end of a stream the store left: reconnect after the store's retry delay.
_OUTAGE_TAIL = (
    f": store_unavailable\nretry: {StoreUnavailableError.DEFAULT_RETRY_AFTER * 1000}\n\n"
).encode()

ENDED_STATUSES = frozenset({"idle", "completed", "failed", "interrupted"})


def unanswered_calls(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in view["pendingToolCalls"] if p.get("submittedAt") is None]


def is_parked(view: dict[str, Any]) -> bool:
    """Parked: the turn waits on at least one unanswered call whose deadline is ahead.

    When every call is answered (or every missing answer has lapsed) the turn continues on
    its own, so the stream keeps waiting for its events.
    """
    if view["status"] != "suspended_client_tool":
        return False
    at = now_ms()
    return any(p["deadlineAt"] > at for p in unanswered_calls(view))


async def message_waiting(runtime: AgentRuntime, session_id: str) -> bool:
    # A new message delivered over the pending calls (resume with_message) wakes the parked
    # turn although its calls look unanswered: the runtime stashes it on the session first.
    state = await runtime.session(session_id)
    return records.STASH_KEY in state.metadata


async def event_stream(
    runtime: AgentRuntime,
    session_id: str,
    after: int,
    *,
    resend_pending: bool,
    poll_seconds: float = POLL_SECONDS,
    view: dict[str, Any] | None = None,
) -> AsyncIterator[bytes]:
    """Yield the session's events after sequence ``after`` until the turn ends or parks.

    With ``resend_pending`` (a reconnect), a ``pending`` frame without an id lists the calls
    the session still waits on, so a client that missed their ``tool_start`` /
    ``tool_approval_request`` can answer them. It comes once the stream has replayed the
    events stored when it attached, never before them: a client shows a call after the
    message that led to it. ``view``: the session's status view, read just before (the route
    reads it for its 404); it serves the pending frame and the first read's end check, so
    attaching costs one status read and one events read.
    """
    body = _event_frames(runtime, session_id, after, resend_pending, poll_seconds, view)
    async for chunk in end_on_outage(body, _OUTAGE_TAIL):
        yield chunk


async def _event_frames(
    runtime: AgentRuntime,
    session_id: str,
    after: int,
    resend_pending: bool,
    poll_seconds: float,
    view: dict[str, Any] | None,
) -> AsyncIterator[bytes]:
    pending: _Pending | None = None
    if resend_pending:
        if view is None:
            view = await runtime.status(session_id)
        pending = _Pending(session_id, view)
    async with runtime.signals.subscribe(session_id) as signal:
        follow = _follow(runtime, session_id, after, poll_seconds, signal, view, caught_up=True)
        async for item in follow:
            if item is _CAUGHT_UP:
                if pending is not None and pending.calls:
                    yield pending.frame()
                pending = None
            elif item is None:
                yield KEEP_ALIVE
            elif isinstance(item, SessionEvent):
                if pending is not None:
                    pending.saw(item)
                yield frame(item.dump(), item.sequence)


class _Pending:
    """The ``pending`` frame of a reconnect: the calls the attach-time status view lists as
    waiting, less those the replay has since shown closed (their ``tool_end``, or the
    ``turn_end`` of their turn)."""

    def __init__(self, session_id: str, view: dict[str, Any]) -> None:
        self._session_id = session_id
        self._run_id = view["runId"]
        waiting = view["status"] not in ENDED_STATUSES
        self.calls = unanswered_calls(view) if waiting else []

    def saw(self, item: SessionEvent) -> None:
        """Drop the calls ``item``, a replayed event, closes."""
        if item.type == "turn_end":
            self.calls = []
        elif item.type == "tool_end":
            closed = item.data.get("toolCallId")
            self.calls = [c for c in self.calls if c["toolCallId"] != closed]

    def frame(self) -> bytes:
        return frame(
            {
                "type": "pending",
                "sessionId": self._session_id,
                "runId": self._run_id,
                "data": {"toolCalls": self.calls},
            }
        )


class _CaughtUp:
    """The marker ``_follow`` yields once it has sent every event stored when it attached."""


_CAUGHT_UP = _CaughtUp()


async def follow_events(
    runtime: AgentRuntime,
    session_id: str,
    after: int,
    poll_seconds: float = POLL_SECONDS,
    *,
    view: dict[str, Any] | None = None,
) -> AsyncIterator[SessionEvent | None]:
    """The session's events after ``after``, until the turn ends or parks; ``None`` asks the
    caller for a keep-alive (every ``HEARTBEAT_SECONDS`` of silence).

    ``view``: a status view the caller has just read; the first read decides the end from it
    instead of reading the status again (it was read before that read's events, which is all
    the end check needs).
    """
    async with runtime.signals.subscribe(session_id) as signal:
        async for item in _follow(runtime, session_id, after, poll_seconds, signal, view):
            if not isinstance(item, _CaughtUp):
                yield item


async def _follow(
    runtime: AgentRuntime,
    session_id: str,
    after: int,
    poll_seconds: float,
    signal: asyncio.Event | None,
    view: dict[str, Any] | None,
    *,
    caught_up: bool = False,
) -> AsyncIterator[SessionEvent | None | _CaughtUp]:
    """The loop of ``follow_events``; with ``caught_up``, it yields ``_CAUGHT_UP`` once, at its
    first read that finds nothing new (before it ends or waits)."""
    beat = _Heartbeat()
    outage = _Outage()
    while True:
        if signal is not None:
            signal.clear()  # before the read: a commit after it sets the signal again
        try:
            batch, done = await _poll(runtime, session_id, after, view)
        except Exception as exc:
            if not is_transient(exc):
                raise
            # The store is unreachable: wait it out (the next poll repeats this one), and
            # give up once it has been gone too long.
            now = beat.loop.time()
            pause = outage.failed(exc, now, poll_seconds)
            if beat.due(now):
                yield None
            await asyncio.sleep(pause)
            continue
        outage, view = _Outage(), None
        if not batch:
            if caught_up:
                caught_up = False
                yield _CAUGHT_UP
            if done:
                return
            if signal is not None:
                # Pushed: sleep until the session's events commit; no query meanwhile.
                while not await beat.wait_for(signal):
                    yield None
                continue
            if beat.due(beat.loop.time()):
                yield None
            await asyncio.sleep(poll_seconds)
            continue
        for item in batch:
            after = item.sequence
            yield item
        beat.sent(beat.loop.time())


class _Heartbeat:
    """When an open stream last sent something, so it sends a keep-alive after
    ``HEARTBEAT_SECONDS`` of silence."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.last_sent = self.loop.time()

    def sent(self, now: float) -> None:
        """The stream sent something at ``now``."""
        self.last_sent = now

    def due(self, now: float) -> bool:
        """Whether a keep-alive is due at ``now``; when it is, it counts as sent."""
        if now - self.last_sent < HEARTBEAT_SECONDS:
            return False
        self.sent(now)
        return True

    async def wait_for(self, signal: asyncio.Event) -> bool:
        """Wait for ``signal`` until a keep-alive is due: ``True`` once it is set, ``False``
        when the keep-alive is due first (it then counts as sent)."""
        if signal.is_set():
            return True
        wait = HEARTBEAT_SECONDS - (self.loop.time() - self.last_sent)
        try:
            await asyncio.wait_for(signal.wait(), max(wait, 0.0))
        except TimeoutError:
            self.sent(self.loop.time())
            return False
        return True


class _Outage:
    """A run of failed polls against an unreachable store: when it began and how many."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.failures = 0

    def failed(self, exc: Exception, now: float, poll_seconds: float) -> float:
        """Record a poll that failed with the transient ``exc`` at ``now`` (the first one
        logs the outage); returns how long to back off before the next poll.

        Raises:
            StoreUnavailableError: the store has been gone ``STORE_WAIT_SECONDS`` or more.
        """
        if self.since is None:
            self.since = now
            store_unavailable(None, exc)
        if now - self.since >= STORE_WAIT_SECONDS:
            raise StoreUnavailableError() from None
        self.failures += 1
        backoff: float = poll_seconds * 2**self.failures
        return min(1.0, backoff)


async def _poll(
    runtime: AgentRuntime, session_id: str, after: int, view: dict[str, Any] | None = None
) -> tuple[list[SessionEvent], bool]:
    """The events after ``after``, and, when there are none, whether the stream is done.

    ``view``: a status view read before this call (the first read of a stream), used as is.
    """
    if view is None:
        batch = await runtime.events(session_id, after)
        if batch:
            return batch, False
        view = await runtime.status(session_id)
    # Everything that decides the end is read BEFORE the events: a status (and the stash a
    # new message leaves) commits together with its events, so an empty read after them
    # means the client has every event up to that state.
    done = view["status"] in ENDED_STATUSES or (
        is_parked(view) and not await message_waiting(runtime, session_id)
    )
    return await runtime.events(session_id, after), done
