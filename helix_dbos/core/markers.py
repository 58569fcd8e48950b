"""Row markers: which conversation rows are a run's own input, and which are notifications.

Input is never identified by role. A user row is a run's input when it carries the entry-input
marker (``meta.entryInput.runId``); a sub-agent completion notification (``meta.source``) is
never user input, even though the model reads it as a user row. Rows written before the marker
existed have none: a plain user row without a notification marker counts as input.
"""

from __future__ import annotations

from typing import Any

from .messages import Message

__all__ = [
    "SUB_AGENT_COMPLETION_SOURCE",
    "companion_notification",
    "entry_input_run",
    "is_input_row",
    "is_sub_agent_notification",
    "mark_entry_input",
    "sub_agent_notification",
]

#: ``meta.source`` of a sub-agent completion notification.
SUB_AGENT_COMPLETION_SOURCE = "sub_agent_completion"


def mark_entry_input(message: Message, run_id: str) -> Message:
    """``message`` marked as the input of ``run_id`` (a copy; other markers are kept)."""
    meta: dict[str, Any] = dict(message.meta or {})
    meta["entryInput"] = {"runId": run_id}
    return message.model_copy(update={"meta": meta})


def entry_input_run(message: Message) -> str | None:
    """The run whose own input this row is, if it is marked."""
    marker = (message.meta or {}).get("entryInput")
    return marker.get("runId") if isinstance(marker, dict) else None


def is_sub_agent_notification(message: Message) -> bool:
    """Whether the row is a sub-agent completion notification (never user input)."""
    return (message.meta or {}).get("source") == SUB_AGENT_COMPLETION_SOURCE


def is_input_row(message: Message) -> bool:
    """Whether the row is user input: marked as an entry's input, or an unmarked legacy user
    row. A notification never is."""
    if message.role != "user" or is_sub_agent_notification(message):
        return False
    legacy = not {k for k in (message.meta or {}) if k != "restoredFrom"}
    return entry_input_run(message) is not None or legacy


def sub_agent_notification(text: str, child_session_id: str) -> Message:
    """A user row that tells a parent a sub-agent finished (the model reads it; it is never
    user input for a retry)."""
    return Message(
        role="user",
        content=text,
        meta={"source": SUB_AGENT_COMPLETION_SOURCE, "childSessionId": child_session_id},
    )


def companion_notification(notice: dict[str, Any]) -> Message:
    """A companion's reply as its parent reads it: a sub-agent completion notification
    (never user input), from the notice ``{"companion", "sessionId", "runId", "text"}``."""
    row = sub_agent_notification(str(notice["text"]), str(notice["sessionId"]))
    meta = dict(row.meta or {})
    meta["companion"] = {"name": notice["companion"], "runId": notice["runId"]}
    return row.model_copy(update={"meta": meta})
