"""Events a turn emits to its session's durable stream (served over SSE)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = ["EventType", "SessionEvent", "event"]

EventType = Literal[
    "turn_start",
    "text",
    "text_delta",
    "tool_start",
    "tool_end",
    "tool_approval_request",
    "tool_approval_counted",
    "tool_deadline_near",
    "suspended",
    "turn_end",
    "user_message",
    "session_healed",
    "rewound",
    "companion_message",
]


class SessionEvent(BaseModel):
    """One event of a session's stream; ``sequence`` is its SSE id."""

    sequence: int = 0
    type: str
    run_id: str | None = Field(default=None, serialization_alias="runId")
    session_id: str | None = Field(default=None, serialization_alias="sessionId")
    data: dict[str, Any] = Field(default_factory=dict)

    def dump(self) -> dict[str, Any]:
        """The wire form."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def event(type_: EventType, **data: Any) -> dict[str, Any]:
    """An event to append: ``{"type": ..., "data": {...}}`` (the store assigns the sequence)."""
    return {"type": type_, "data": data}
