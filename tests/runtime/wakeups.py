"""Losing a submit's wake-ups on purpose (the answer is still stored)."""

from __future__ import annotations

from typing import Any

import pytest
from dbos import DBOS

from helix_dbos.runtime import AgentRuntime, wake


def lose_answer_wakeups(rt: AgentRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every submit's wake-up fail (the answer is still stored): both the message
    enlisted in the answer's transaction and a plain send after it."""

    def lost(message: Any) -> bool:
        return isinstance(message, dict) and message.get("kind") == "answer"

    real_send = DBOS.send_async

    async def losing_send(destination_id: str, message: Any, topic: Any = None, **kw: Any) -> None:
        if lost(message):
            raise ConnectionError("the wake-up was lost")
        await real_send(destination_id, message, topic, **kw)

    monkeypatch.setattr(DBOS, "send_async", losing_send)
    real_enlist = wake.enlist

    async def losing_enlist(
        ctx: Any, conn: Any, destination: str, message: Any, *rest: Any
    ) -> None:
        if lost(message):
            raise ConnectionError("the wake-up was lost")
        await real_enlist(ctx, conn, destination, message, *rest)

    monkeypatch.setattr(wake, "enlist", losing_enlist)
