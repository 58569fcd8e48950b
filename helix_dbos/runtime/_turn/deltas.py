"""Streaming a model's text deltas into the session's event stream while the model step runs.

Deltas are coalesced (one ``text_delta`` event per ``FLUSH_SECONDS`` at most, plus the rest at
the end of the call) so a long reply does not cost a transaction per token. They are a live
view only: the step's durable ``text`` event carries the complete text, and a re-executed step
(a retry, or a crash before its commit) may stream its deltas again; a client that wants
exactly-once text reads ``text``.
"""

from __future__ import annotations

import time
from typing import Any

from ...core.events import event
from ...store import SessionStore

__all__ = ["FLUSH_SECONDS", "DeltaStream"]

FLUSH_SECONDS = 0.05


class DeltaStream:
    """Buffers text deltas of one model call and appends them as ``text_delta`` events."""

    def __init__(self, store: SessionStore, session_id: str, run_id: str, step: int) -> None:
        self._store = store
        self._session_id = session_id
        self._run_id = run_id
        self._step = step
        self._buffer: list[str] = []
        self._last_flush = time.monotonic()

    async def __call__(self, delta: str) -> None:
        """Receive one delta (the adapters' ``on_text`` sink)."""
        self._buffer.append(delta)
        if time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            await self.flush()

    async def flush(self) -> None:
        """Append what is buffered as one event."""
        self._last_flush = time.monotonic()
        pending = self.take()
        if pending is not None:
            await self._store.append_events(self._session_id, self._run_id, [pending])

    def take(self) -> dict[str, Any] | None:
        """What is buffered, as one ``text_delta`` event (or ``None``); the buffer empties.

        The model step puts it in its own commit, so the last delta costs no transaction.
        """
        if not self._buffer:
            return None
        text, self._buffer = "".join(self._buffer), []
        return event("text_delta", delta=text, step=self._step)
