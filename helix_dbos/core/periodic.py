"""A background task that runs one pass every interval until it is stopped.

The runtime's deadline keeper and the store's retention sweeper are both this loop: wait an
interval (or until ``stop``), run a pass, report a failed pass and try again at the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

__all__ = ["Periodic"]

#: How long ``stop`` lets the pass in progress finish before it cancels it.
STOP_GRACE_SECONDS = 10


class Periodic:
    """Runs ``one_pass`` every ``interval_seconds`` from ``start`` until ``stop``; a pass that
    raises is handed to ``failed`` (the database may be down: the next pass tries again)."""

    __slots__ = ("_failed", "_interval", "_one_pass", "_stopping", "_task")

    def __init__(
        self,
        interval_seconds: float,
        one_pass: Callable[[], Awaitable[object]],
        failed: Callable[[Exception], None],
    ) -> None:
        self._interval = interval_seconds
        self._one_pass = one_pass
        self._failed = failed
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the passes (a no-op with an interval of 0, or when already started)."""
        if self._interval > 0 and self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Let the pass in progress finish (bounded), then end."""
        if self._task is None:
            return
        self._stopping.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=STOP_GRACE_SECONDS)
        except (TimeoutError, asyncio.CancelledError):
            self._task.cancel()
        self._task = None

    async def _run(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self._interval)
                return
            try:
                await self._one_pass()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed(exc)
