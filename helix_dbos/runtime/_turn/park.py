"""A turn's park: its workflow waits on ``DBOS.recv`` for each call of its batch.

Each call has its own topic (its id), so answers arriving in any order are each taken once.
The wait ends when every call has an answer or its deadline lapsed, or when a new message
(``abandon``) or a stop says so; with a hot window, a wait that times out ends the park, and
the turn's hibernate commit decides on the row (``_turn/hibernation.py``). While parked, the turn's
batch is published for the submit that completes it (``batch_job``).
"""

from __future__ import annotations

import time
from typing import Any, cast

from dbos import DBOS

from ...observability import tracing
from .. import names
from .._context import current
from .._handover import ParkedBatch
from ..records import PlanItem, WokenAnswers

__all__ = ["forget_inputs", "park"]


async def park(
    session_id: str,
    run_id: str,
    suspending: list[PlanItem],
    deadlines: dict[str, int],
    batch: ParkedBatch | None = None,
    window: float | None = None,
) -> tuple[WokenAnswers, bool]:
    """Wait until every call of ``run_id``'s batch has an answer or its deadline has lapsed (or a new message,
    or a stop). ``batch``: published while parked, if the submit completing the batch
    may continue the turn (``batch_job``). ``window``: the hot window, if
    the turn may hibernate: then a wait that times out (the window's end or a deadline)
    stops the park, and the hibernate commit decides on the row.

    Returns the calls woken with an answer, each with the answer's time (the commit waits
    until those answers are visible to it), and whether a wait timed out with a window.
    """
    forget_inputs(suspending)
    ctx = current()
    parked = ctx.parked
    workflow_id = DBOS.workflow_id or ""
    parked.add(workflow_id)
    if batch is not None:
        ctx.batch_jobs.publish(batch)
    woken: WokenAnswers = {}
    # The clock only sizes the waits; DBOS records each absolute wake time, and a replay
    # takes each wait's recorded outcome whatever the sizes are now.
    hot_until = None if window is None else time.time() + window
    try:
        for item in suspending:
            remaining = deadlines[item["toolCallId"]] / 1000 - time.time()
            if hot_until is not None:
                remaining = min(remaining, hot_until - time.time())
            with tracing.client_tool_wait_span(
                tool_name=item["toolName"],
                tool_call_id=item["toolCallId"],
                session_id=session_id,
                run_id=run_id,
                deadline_at=deadlines[item["toolCallId"]],
                kind=item["kind"],
            ) as span:
                message = await DBOS.recv_async(
                    names.tool_result_topic(item["toolCallId"]),
                    timeout_seconds=max(0.0, remaining),
                )
                span.set_outcome(tracing.wait_outcome(message))
            if message is None and hot_until is not None:
                return woken, True
            kind = message.get("kind") if isinstance(message, dict) else None
            if kind == "answer":
                woken[item["toolCallId"]] = int(message.get("submittedAt") or 0)
            elif kind in ("abandon", "stop"):
                break
    finally:
        parked.discard(workflow_id)
        ctx.batch_jobs.withdraw(workflow_id)
    return woken, False


def forget_inputs(items: list[PlanItem]) -> None:
    """Drop the parked calls' inputs from their plan items (in place).

    An input can be large (a file's content) and a parked turn should hold little. After the
    park nothing reads a suspending call's input from the plan: its pending entry (committed
    with the model's answer) holds it, and that is what an approved call runs with.
    """
    for item in items:
        cast(dict[str, Any], item).pop("input", None)
