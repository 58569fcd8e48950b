"""A companion's replies: the end of each of its turns handed to its parent, exactly once.

When a companion's turn ends (completed or failed), its persistent workflow commits the reply
to the parent (``report``), under the checkpoint slot ``names.companion_reply_slot`` of the
companion's run, so a replay or a crash between the turn's end and this commit hands it over
once. On the parent's row, locked: a parent between turns gets the reply appended to its
conversation at once, as a sub-agent completion notification (``markers.
companion_notification``: never user input for a retry); a parent whose turn runs or is
parked keeps it under ``records.COMPANION_NOTICES_KEY``, and its next entry appends it before
its message (``entry.open_turn``): a row never lands between a tool call and its result.
Either way a ``companion_message`` event is appended to the parent's stream.
"""

from __future__ import annotations

from typing import Any

from ...core.events import event
from ...core.markers import companion_notification
from ...core.session import SessionState
from ...observability.log import log_event
from .. import names, records
from .._commits.once import CommitContext, commit_once
from .._commits.opening import ACTIVE_STATUSES
from .._context import current
from ..records import TurnOutcome
from .wake_parent import after_reply

__all__ = ["report", "reply_text"]


def reply_text(companion: str, outcome: TurnOutcome | dict[str, Any]) -> str:
    """What the parent's model reads for a companion's turn that ended with ``outcome``."""
    if outcome.get("outcome") == "completed":
        return f"[companion {companion}] {outcome.get('text', '')}"
    error = outcome.get("error") or {}
    return f"[companion {companion} failed] {error.get('message', 'its turn failed')}"


async def report(session_id: str, run_id: str, root_session_id: str, outcome: TurnOutcome) -> None:
    """Hand the companion ``session_id``'s reply (its turn ``run_id`` ended with
    ``outcome``) to its parent, once. Nothing for a root session (not a companion) or a turn
    that was stopped or hibernated."""
    if session_id == root_session_id or outcome["outcome"] not in ("completed", "failed"):
        return
    store = current().store
    companion = await store.load(session_id)
    if companion is None or companion.parent_session_id is None:
        return
    parent_id = companion.parent_session_id
    notice = {
        "companion": companion.agent_type,
        "sessionId": session_id,
        "runId": run_id,
        "text": reply_text(companion.agent_type, outcome),
    }

    def decide(states: dict[str, SessionState]) -> tuple[str, str | None]:
        parent = states[parent_id]
        if parent.status not in ACTIVE_STATUSES:
            # Appended below. The row is saved all the same: its version moves, so a claim
            # that read the conversation before this append loses its swap (rule 26).
            return "appended", parent.run_id
        parent.metadata.setdefault(records.COMPANION_NOTICES_KEY, []).append(notice)
        return "queued", parent.run_id

    async def body() -> str:
        _, (how, run) = await store.update([parent_id], decide)
        if how == "appended":
            await store.append_messages(parent_id, run, [companion_notification(notice)])
        await store.append_events(
            parent_id,
            run,
            [
                event(
                    "companion_message",
                    companion=companion.agent_type,
                    companionSessionId=session_id,
                    runId=run_id,
                    outcome=outcome["outcome"],
                    text=str(outcome.get("text") or ""),
                    notification=how,
                )
            ],
        )
        return how

    how = await commit_once(
        CommitContext(names.companion_reply_slot(session_id, run_id)),
        session_id,
        run_id,
        body,
        session_ids=[session_id, parent_id],
    )
    log_event(
        "companion.replied", sessionId=session_id, parentSessionId=parent_id, runId=run_id, how=how
    )
    if how == "appended":
        parent_type = (await store.get(parent_id)).agent_type
        await after_reply(parent_id, parent_type, companion.agent_type, run_id)
