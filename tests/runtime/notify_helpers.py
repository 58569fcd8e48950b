"""What the notification tests share: fast delivery options, a recording hook, an approval."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from helix_dbos.runtime import AgentRuntime, Notification

__all__ = ["FAST", "Recorder", "approve"]

#: Fast delivery for the tests: the dispatcher looks every 20 ms, retries after 50 ms.
FAST = {"poll_seconds": 0.02, "retry_base_seconds": 0.05, "retry_max_seconds": 0.1}


class Recorder:
    """A hook that keeps what it is told; ``fail`` makes it raise that many times first."""

    def __init__(self, fail: int = 0) -> None:
        self.notes: list[Notification] = []
        self.fail = fail
        self._changed = asyncio.Event()

    async def __call__(self, note: Notification) -> None:
        self.notes.append(note)
        self._changed.set()
        if self.fail > 0:
            self.fail -= 1
            raise ConnectionError("the mail server is down")

    def of(self, kind: str) -> list[Notification]:
        return [n for n in self.notes if n.kind == kind]

    async def until(self, done: Callable[[], bool], timeout: float = 20.0) -> None:
        """Wait (on the hook's own calls, never polling the runtime) until ``done()``."""
        async with asyncio.timeout(timeout):
            while not done():
                self._changed.clear()
                await self._changed.wait()


async def approve(rt: AgentRuntime, sid: str, pending: dict[str, Any]) -> None:
    answer = await rt.submit_tool_result(
        sid,
        pending["toolCallId"],
        kind="approval-response",
        approval_id=pending["approvalId"],
        approved=True,
    )
    assert answer.status == "accepted"
