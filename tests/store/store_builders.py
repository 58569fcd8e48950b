"""Row builders shared by the store tests."""

from __future__ import annotations

import time
from typing import Any

from helix_dbos.core.session import PendingCall, SessionState


def now_ms() -> int:
    """Wall-clock epoch milliseconds."""
    return int(time.time() * 1000)


def session(session_id: str, *, root: str | None = None, **fields: Any) -> SessionState:
    """A new session row; a root unless ``root`` names another session."""
    return SessionState(
        session_id=session_id,
        agent_type=fields.pop("agent_type", "assistant"),
        root_session_id=root or session_id,
        parent_session_id=fields.pop("parent_session_id", root),
        **fields,
    )


def pending_call(tool_call_id: str, tool_name: str, run_id: str, index: int = 0) -> PendingCall:
    """A client call waiting for its answer, as the runtime registers it."""
    registered = now_ms()
    return PendingCall(
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        input={"query": tool_call_id},
        run_id=run_id,
        kind="client",
        index=index,
        deadline_at=registered + 300_000,
        registered_at=registered,
        completed_retention_ms=3_600_000,
    )
