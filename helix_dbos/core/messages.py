"""Conversation messages and the tool calls inside them: pure, JSON-ready data."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Message", "Role", "ToolCall"]

Role = Literal["user", "assistant", "tool", "system"]


class ToolCall(BaseModel):
    """One tool call emitted by the model."""

    model_config = ConfigDict(frozen=True)

    id: str
    """The provider's (or the scripted model's) tool-call id; unique in a session."""
    name: str
    """The tool's name."""
    input: dict[str, Any] = Field(default_factory=dict)
    """The arguments, as JSON."""


class Message(BaseModel):
    """One row of the conversation log (``__agents_messages.content``).

    A ``tool`` message answers exactly one ``ToolCall`` of the assistant message before it.
    """

    role: Role
    content: str = ""
    """The text: the user's words, the model's reply, or the tool result as the model reads it."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """On an assistant message: the calls it emitted, in the model's order."""
    tool_call_id: str | None = None
    """On a tool message: the call it answers."""
    tool_name: str | None = None
    """On a tool message: the tool's name."""
    result: Any = None
    """On a tool message: the JSON result, when the call succeeded."""
    is_error: bool = False
    """On a tool message: the call failed (the model sees a normal failed tool result)."""
    error_code: str | None = None
    """On a failed tool message: the machine code (``client_tool_timeout`` ...), if any."""
    meta: dict[str, Any] | None = None
    """Markers the runtime reads, never the model: ``entryInput`` (``{"runId"}``: the row is
    that run's own input) and ``source`` (``"sub_agent_completion"``: a notification, never
    user input). See ``helix_dbos.core.markers``. A tool row of a call whose deadline lapsed
    carries ``expired`` (``{"onTimeout"}``: the tool's policy applied)."""

    def to_row(self) -> dict[str, Any]:
        """The JSON stored in ``__agents_messages.content``."""
        return self.model_dump(mode="json", exclude_defaults=True)

    @classmethod
    def from_row(cls, role: str, content: dict[str, Any]) -> Message:
        """Rebuild a message from its stored row."""
        return cls.model_validate({**content, "role": role})
