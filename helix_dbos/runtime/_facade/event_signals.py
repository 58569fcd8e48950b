"""Pushed wake-ups for event streams: one ``LISTEN`` connection per process, fanned out.

Revision 0007's trigger on ``__agents_events`` sends ``NOTIFY __agents_events, '<session>'``
when a session's events commit (NOTIFY is delivered at commit, never before), from whichever
process wrote them. Each process keeps ONE listening connection, opened by the first stream
that subscribes, and sets the ``asyncio.Event`` of every stream of that session and of the
sessions above it (a sub-agent's events wake its root's streams). An idle open
stream therefore costs no query at all; a stream on process B of a turn running on A wakes
within one NOTIFY round trip. A stream of a turn running in its own process is woken by the
commit itself (``wake``, through ``SessionStore.on_events``), without waiting for the NOTIFY.

SQLite has no NOTIFY: there ``available`` is false and streams poll the store (and so do they
when the listening connection cannot be opened). When the connection drops, every stream is
woken (it re-reads once, losing nothing) while the listener reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ...config import DatabaseUrls
from ...observability.log import log_event
from ...store import EVENTS_CHANNEL, listen

__all__ = ["EventSignals"]

#: How long a subscriber waits for the listener's first LISTEN before it falls back to polling.
CONNECT_TIMEOUT_SECONDS = 5.0


def _with_ancestors(session_id: str) -> list[str]:
    """``session_id`` and the sessions it may be a sub-agent of.

    A sub-agent's session id is its parent's, a dot and the call's id
    (``names.child_session_id``), so each prefix before a dot. A root's stream must wake when
    a sub-agent's events commit: a sub-agent that parks changes what the root waits on without
    a root event. A root id with a dot of its own wakes a stream more often than needed, never
    less (a woken stream re-reads and finds nothing new).
    """
    parts = session_id.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


class EventSignals:
    """Per-session wake-ups from Postgres NOTIFY for this process's event streams."""

    def __init__(self, urls: DatabaseUrls) -> None:
        self._url = None if urls.is_sqlite else urls.user
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self.notifications = 0
        """NOTIFYs received (for tests and benchmarks)."""

    @property
    def available(self) -> bool:
        """Whether streams can wait for pushes (Postgres, listener connected)."""
        return self._url is not None and self._listening.is_set()

    @contextlib.asynccontextmanager
    async def subscribe(self, session_id: str) -> AsyncIterator[asyncio.Event | None]:
        """An event set whenever ``session_id``'s events commit; ``None``: poll instead.

        Subscribe BEFORE reading the events, and ``clear()`` it before each read: a commit
        after the read then always sets it.
        """
        if self._url is None:
            yield None
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._listen(), name="helix-event-listener"
            )
        try:
            await asyncio.wait_for(self._listening.wait(), CONNECT_TIMEOUT_SECONDS)
        except TimeoutError:
            yield None
            return
        signal = asyncio.Event()
        self._waiters.setdefault(session_id, set()).add(signal)
        try:
            yield signal
        finally:
            waiters = self._waiters.get(session_id)
            if waiters is not None:
                waiters.discard(signal)
                if not waiters:
                    del self._waiters[session_id]

    async def _listen(self) -> None:
        assert self._url is not None
        backoff = 0.1
        while True:
            try:
                async with listen(self._url, EVENTS_CHANNEL) as payloads:
                    self._listening.set()
                    # Anything committed while we were not listening: everyone re-reads once.
                    self._wake_all()
                    backoff = 0.1
                    async for payload in payloads:
                        self.notifications += 1
                        self.wake({payload})
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log_event("events.listener_lost", error=f"{exc!r}"[:300])
            self._listening.clear()
            self._wake_all()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def wake(self, session_ids: set[str]) -> None:
        """Wake this process's streams of ``session_ids``, whose events this process has just
        committed: they read them now instead of one NOTIFY round trip later (the NOTIFY
        still comes, and finds nothing new)."""
        for session_id in session_ids:
            for woken in _with_ancestors(session_id):
                for signal in self._waiters.get(woken, ()):
                    signal.set()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for signal in waiters:
                signal.set()

    async def close(self) -> None:
        """Stop listening (at shutdown)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        self._listening.clear()
