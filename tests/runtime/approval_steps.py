"""What the approval policies' tests share: a parked approval, a decision, the tool's end."""

from __future__ import annotations

from typing import Any

from helix_dbos.core.approval_policy import Decider
from helix_dbos.runtime import AgentRuntime
from helix_dbos.store.approvals import PendingApproval

SETTLE_SECONDS = 30.0


async def parked(rt: AgentRuntime, tool: str, owner: str = "ada") -> PendingApproval:
    handle = await rt.start("treasurer", tool, principal=owner, tenant="acme")
    await rt.wait_for_pending(handle.session_id)
    (approval,) = (await rt.approvals(session_id=handle.session_id)).approvals
    return approval


async def decide(
    rt: AgentRuntime, a: PendingApproval, who: Decider | None, approved: bool = True, **more: Any
) -> Any:
    return await rt.submit_tool_result(
        a.root_session_id,
        a.tool_call_id,
        kind="approval-response",
        approval_id=a.approval_id,
        approved=approved,
        decider=who,
        **more,
    )


async def tool_end(rt: AgentRuntime, session_id: str) -> dict[str, Any]:
    await rt.wait(session_id, timeout=SETTLE_SECONDS)
    events = await rt.store.read_events(session_id, 0)
    (end,) = [e.data for e in events if e.type == "tool_end"]
    return end
