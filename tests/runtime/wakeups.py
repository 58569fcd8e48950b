"""Losing a submit's wake-ups on purpose (the answer is still stored), and counting the
wake-up messages DBOS holds for a turn."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOS

from helix_dbos.runtime import AgentRuntime
from helix_dbos.runtime._turn import wake
from tests.support.asker import parked


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

    async def losing_enlist(ctx: Any, destination: str, message: Any, *rest: Any) -> None:
        if lost(message):
            raise ConnectionError("the wake-up was lost")
        await real_enlist(ctx, destination, message, *rest)

    monkeypatch.setattr(wake, "enlist", losing_enlist)


async def wake_ups_sent(rt: AgentRuntime, workflow_id: str, topic: str) -> int:
    """The messages DBOS holds for ``workflow_id`` on ``topic``, consumed or not: the rows
    a ``recv`` on that topic wakes for (its system tables share the store's database)."""
    table = "dbos.notifications" if rt.store.dialect == "postgresql" else "notifications"
    async with rt.store.engine.connect() as conn:
        count = await conn.scalar(
            sa.text(f"SELECT count(*) FROM {table} WHERE destination_uuid = :d AND topic = :t"),
            {"d": workflow_id, "t": topic},
        )
    return int(count or 0)


async def answered_with_its_wake_up_lost(rt: AgentRuntime) -> str:
    """Park an ``asker`` turn and answer its call with every wake-up of that answer lost:
    the answer is stored, and the turn waits on for the reconciler. The session's id."""
    sid, [pending] = await parked(rt)
    with pytest.MonkeyPatch.context() as losing:
        lose_answer_wakeups(rt, losing)
        answer = await rt.submit_tool_result(sid, pending["toolCallId"], result={"text": "blue"})
    assert answer.status == "accepted"
    return sid
