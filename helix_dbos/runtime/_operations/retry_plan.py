"""Planning a retry (pure): the conversation it leaves and what the new run starts from.

The rules are those of ``_operations/retry.py``'s docstring (2 to 6, and the checkpoint rule), one
named step each. Nothing here reads or writes the database: ``retry.apply_lifecycle``
loads the rows and the session, asks ``plan_retry`` and commits the ``Reshape`` it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.markers import entry_input_run, is_input_row, is_sub_agent_notification
from ...core.markers import mark_entry_input as _mark
from ...core.messages import Message
from ...core.pairing import not_executed_results, unpaired_tool_calls
from ...core.session import SessionState
from ...errors import RequestValidationError
from ...store import LogRow
from .._turn.resolve import resolve_call
from .._turn.steps import tool_result_message
from ..records import STASH_KEY, ToolCallRef

__all__ = [
    "Reshape",
    "again",
    "checkpoint_tail",
    "committed_steps",
    "drained",
    "given",
    "heals",
    "own_input_index",
    "plan_checkpoint_retry",
    "plan_failed_run_retry",
    "plan_retry",
    "rerun_input",
    "stashed_message",
]


@dataclass
class Reshape:
    """The conversation a retry or rewind leaves, and what the new run starts from."""

    desired: list[LogRow | Message]
    """The new conversation: kept rows (re-appended as copies when out of place) and new rows."""
    batch: list[Any] | None = None
    """A restored assistant message's calls: the new run takes them over (no model call)."""
    ended: bool = False
    """The conversation ends with the model's final reply: no run continues."""


def heals(rows: list[LogRow | Message]) -> list[Message]:
    """``not_executed`` results for tool calls left without one (every provider needs one)."""
    return not_executed_results([r.message if isinstance(r, LogRow) else r for r in rows])


def drained(state: SessionState, live: list[LogRow]) -> list[Message]:
    """Results for the session's pending calls whose tool_use has none yet (rule 6): a stored
    answer is used as given; an unanswered call was never executed."""
    open_calls = {tcid for tcid, _ in unpaired_tool_calls([r.message for r in live])}
    out: list[Message] = []
    for entry in sorted(state.pending.values(), key=lambda p: (p.run_id, p.index)):
        if entry.tool_call_id not in open_calls:
            continue
        item: ToolCallRef = {"toolCallId": entry.tool_call_id, "toolName": entry.tool_name}
        resolved = resolve_call(item, entry.dump(), abandon=False)
        if entry.submitted_at is None or "runInput" in resolved:
            # Unanswered, or an approved call whose tool never ran: it was not executed.
            resolved = {
                "toolCallId": entry.tool_call_id,
                "toolName": entry.tool_name,
                "ok": False,
                "errorCode": "not_executed",
            }
        out.append(tool_result_message(resolved))
    return out


def given(text: str, run_id: str) -> Message:
    """A given message, as the input of ``run_id``."""
    return _mark(Message(role="user", content=text), run_id)


def again(row: LogRow, run_id: str) -> Message:
    """A row re-appended as the input of ``run_id`` (naming its original)."""
    meta = {**(row.message.meta or {}), "restoredFrom": row.message_id}
    return _mark(row.message.model_copy(update={"meta": meta}), run_id)


def rerun_input(row: LogRow, run_id: str, message: str | None) -> Message:
    """An input row run again: a given message replaces it, else it is re-appended."""
    return given(message, run_id) if message is not None else again(row, run_id)


def stashed_message(state: SessionState) -> str | None:
    """The message still stashed on the session (rule 5), if any."""
    stash = state.metadata.get(STASH_KEY) or {}
    return stash.get("message") if isinstance(stash, dict) else None


def committed_steps(live: list[LogRow], failed: str) -> bool:
    """Whether the failed run committed a step (an assistant row of its own)."""
    return any(r.run_id == failed and r.message.role == "assistant" for r in live)


def own_input_index(live: list[LogRow], failed: str) -> int | None:
    """Where the failed run's own input row is (the last one marked for it), if anywhere.

    Found by its entry-input marker, never by role."""
    for i in range(len(live) - 1, -1, -1):
        if entry_input_run(live[i].message) == failed and is_input_row(live[i].message):
            return i
    return None


def checkpoint_tail(
    later: list[LogRow], first_input: LogRow | None, run_id: str, message: str | None
) -> list[LogRow | Message]:
    """What follows a checkpoint's conversation: the rows after it that are sub-agent
    notifications (never dropped, never input), its first input run again, and a given
    message when nothing after it was input."""
    tail: list[LogRow | Message] = []
    for row in later:
        if is_sub_agent_notification(row.message):
            tail.append(row)
        elif row is first_input:
            tail.append(rerun_input(row, run_id, message))
    if message is not None and first_input is None:
        tail.append(given(message, run_id))
    return tail


def plan_checkpoint_retry(
    live: list[LogRow], target: list[LogRow], run_id: str, message: str | None
) -> Reshape:
    """A retry from a checkpoint: its conversation (healed), then ``checkpoint_tail``.

    Raises:
        RequestValidationError: nothing after the checkpoint is input and no message is given
            (``cause: message``).
    """
    kept_ids = {r.message_id for r in target}
    later = [r for r in live if r.message_id not in kept_ids]
    first_input = next((r for r in later if is_input_row(r.message)), None)
    if message is None and first_input is None:
        raise RequestValidationError(
            "Nothing after this checkpoint is user input to re-run: give a message",
            cause="message",
        )
    desired: list[LogRow | Message] = list(target)
    return Reshape(desired + heals(desired) + checkpoint_tail(later, first_input, run_id, message))


def plan_failed_run_retry(
    state: SessionState, live: list[LogRow], run_id: str, message: str | None
) -> Reshape:
    """A retry of the session's last run (rules 2 to 6).

    Raises:
        RequestValidationError: the run committed steps and no message is given
            (``cause: message``).
    """
    failed = state.run_id or ""
    results = drained(state, live)
    stashed = stashed_message(state)
    if stashed is not None:
        # Rule 5: drain first, then the stashed message (a given one replaces it).
        keep: list[LogRow | Message] = [*live, *results]
        return Reshape(keep + heals(keep) + [given(message or stashed, run_id)])
    committed = committed_steps(live, failed)
    own = own_input_index(live, failed)
    if not committed and own is not None:
        # Rules 2 and 4: rewind to just before the run's own input and re-append it (a given
        # message replaces it), with the rows after it.
        head: list[LogRow | Message] = [*live[:own], *results]
        return Reshape([*head, rerun_input(live[own], run_id, message), *live[own + 1 :]])
    if committed and message is None:
        raise RequestValidationError(
            "The failed run committed steps: a retry needs a message, as a new message does",
            cause="message",
            runId=failed,
        )
    keep = [*live, *results]
    entry: list[LogRow | Message] = [given(message, run_id)] if message is not None else []
    return Reshape(keep + heals(keep) + entry)


def plan_retry(
    state: SessionState,
    rows: list[LogRow],
    run_id: str,
    message: str | None,
    target: list[LogRow] | None,
) -> Reshape:
    """The retry's new conversation (rules 2 to 6; see ``_operations/retry.py``'s docstring).

    ``target`` is the conversation at an explicit checkpoint, else ``None``.

    Raises:
        RequestValidationError: a message is needed (``cause: message``).
    """
    live = [r for r in rows if r.rewound_at is None]
    if target is not None:
        return plan_checkpoint_retry(live, target, run_id, message)
    return plan_failed_run_retry(state, live, run_id, message)
