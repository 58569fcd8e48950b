"""Sessions with pending calls, as the gauges of pending work count them."""

from __future__ import annotations

from helix_dbos.core.session import CallKind, PendingCall, SessionState, SessionStatus
from helix_dbos.store.store import SessionStore

from .store_builders import now_ms, session

MINUTE_MS = 60_000

WINDOW_MS = 5 * MINUTE_MS


def call(
    tcid: str,
    tool: str,
    kind: CallKind,
    *,
    run: str = "run_1",
    registered: int | None = None,
    deadline: int | None = None,
    answered: bool = False,
) -> PendingCall:
    """A pending call as the runtime parks it (answered: with its answer stored)."""
    at = registered if registered is not None else now_ms()
    return PendingCall(
        tool_call_id=tcid,
        tool_name=tool,
        input={"n": 1},
        run_id=run,
        kind=kind,
        index=0,
        deadline_at=deadline if deadline is not None else at + WINDOW_MS,
        registered_at=at,
        completed_retention_ms=0,
        approval_id=f"{run}::{tcid}" if kind == "approval" else None,
        args_digest="d" if kind == "approval" else None,
        submitted_at=now_ms() if answered else None,
        response={"result": 1} if answered else None,
    )


async def parked(
    store: SessionStore,
    sid: str,
    *calls: PendingCall,
    status: SessionStatus = "suspended_client_tool",
) -> None:
    """A session of run ``run_1`` with ``calls`` in its map, as a park writes it."""
    await store.create_session(session(sid, run_id="run_1"))

    def park(states: dict[str, SessionState]) -> None:
        states[sid].status = status
        for c in calls:
            states[sid].pending[c.tool_call_id] = c

    await store.update([sid], park)
