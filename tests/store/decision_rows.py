"""A decision record row, and writing it."""

from __future__ import annotations

from typing import Any

from helix_dbos.store import decisions
from helix_dbos.store.store import SessionStore


def row(i: int, at: int, **more: Any) -> dict[str, Any]:
    return {
        "decision_key": f"answer:r::c{i}:1",
        "approval_id": f"r::c{i}",
        "session_id": f"s{i % 7}",
        "root_session_id": f"s{i % 7}",
        "run_id": "r",
        "tool_call_id": f"c{i}",
        "tool_name": f"tool{i % 3}",
        "args_digest": "d",
        "edited_digest": None,
        "outcome": "denied" if i % 5 == 0 else "approved",
        "final": True,
        "votes": 1,
        "quorum": 1,
        "reason": None,
        "on_timeout": None,
        "principal": f"approver{i % 4}",
        "tenant": f"tenant{i % 2}",
        "credential": "hook",
        "roles": ["finance"] if i % 2 else None,
        "owner_principal": f"user{i % 3}",
        "owner_tenant": f"tenant{i % 2}",
        "decided_at": at,
        **more,
    }


async def write(store: SessionStore, rows: list[dict[str, Any]]) -> None:
    async def unit() -> None:
        await decisions.queue(rows)

    await store.transact(unit)
