"""What a launched runtime still has in flight, and the wait until it has none.

A test that shows a stopped or fenced turn wrote nothing must first know that everything that
could still write has finished: a guessed pause passes whenever the machine is slow. Two kinds
of work run outside any caller's ``await``: the tasks the runtime starts detached
(``handover.detached``: a turn's first model step, the batch job a submit starts, the next
model step that job starts) and the bodies of its workflows (``RuntimeContext.workflows``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from helix_dbos.runtime import AgentRuntime
from helix_dbos.runtime import _handover as handover
from helix_dbos.runtime._turn import batch_job
from helix_dbos.runtime._turn import first_model_step as first_step

#: How long ``settled`` waits: far beyond what the work needs (milliseconds, or a held model
#: call once released), so a busy machine never fails a test and a stuck turn always does.
SETTLE_SECONDS = 60.0


class InFlight:
    """The detached tasks ``runtime`` starts from now on, and its workflow bodies."""

    def __init__(self, runtime: AgentRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
        self._runtime = runtime
        self.tasks: list[asyncio.Task[Any]] = []
        real = handover.detached

        def detached(work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
            task = real(work)
            self.tasks.append(task)
            return task

        # Each module that starts detached work calls it by the name it imported.
        for module in (handover, first_step, batch_job):
            monkeypatch.setattr(module, "detached", detached)

    def busy(self) -> list[str]:
        """What still runs: detached tasks not done, workflow bodies not parked in ``recv``."""
        ctx = self._runtime.ctx
        running = [f"task {t.get_name()}" for t in self.tasks if not t.done()]
        unparked = len(ctx.workflows) - len(ctx.parked)
        return running + [f"{unparked} workflow bodies not parked"] * (unparked > 0)

    async def settled(self, timeout: float = SETTLE_SECONDS) -> None:
        """Wait until nothing runs: every detached task has ended (returned, fenced, failed
        or cancelled), and every workflow body has returned or is parked in ``recv``, where it
        waits for what only the test sends (an answer, a message, a stop)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while busy := self.busy():
            assert loop.time() < deadline, f"still running after {timeout} s: {busy}"
            await asyncio.sleep(0.01)
