"""A turn's outcomes and results as values: what its workflow returns, a call's result
completed by what its tool returned, and the fence that ends a turn whose run was stopped.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar, cast

from .._commits.once import FENCED
from ..records import (
    FencedResult,
    ServerToolResult,
    ToolCallRef,
    ToolResult,
    TurnError,
    TurnOutcome,
    TurnSummary,
)

__all__ = [
    "Ending",
    "new_summary",
    "Stopped",
    "check_fence",
    "completed",
    "ids",
    "outcome_of",
    "stopped_outcome",
]

R = TypeVar("R")

Ending = Literal["completed", "failed"]
"""How a turn that was not stopped ends."""


class Stopped(Exception):
    """A step found the turn's run stopped or superseded: end now, writing nothing more."""


def check_fence(committed: R | FencedResult) -> R:
    """A step's result; ends the turn when the step found its run stopped or superseded."""
    # A step recorded by 0.1 (a replayed parked turn) may have returned None.
    if isinstance(committed, dict) and FENCED in committed:
        raise Stopped(committed[FENCED])
    return committed


def stopped_outcome(run_id: str) -> TurnOutcome:
    """The outcome of a turn that ended writing nothing more (stopped, superseded)."""
    return outcome_of("stopped", "", None, None, run_id)


def outcome_of(
    outcome: Ending | Literal["stopped", "hibernated"],
    text: str,
    output: Any,
    error: TurnError | None,
    run_id: str,
) -> TurnOutcome:
    """The workflow's result (a sub-agent's parent reads it as the tool result)."""
    return {"outcome": outcome, "text": text, "output": output, "error": error, "runId": run_id}


def ids(item: ToolCallRef) -> ToolCallRef:
    return {"toolCallId": item["toolCallId"], "toolName": item["toolName"]}


def completed(result: ToolCallRef, ran: ServerToolResult) -> ToolResult:
    """A call's result completed by what its tool (or sub-agent) returned, which wins."""
    # The ids and the tool's ``ok`` make a ToolResult; TypedDict merging cannot say so.
    return cast(ToolResult, {**result, **ran})


def new_summary() -> TurnSummary:
    """A turn's running totals before its first step."""
    return {"steps": 0, "clientCalls": 0, "waitMs": 0, "inputTokens": 0, "outputTokens": 0}
