"""Session state, pending client calls, ownership, tombstones and submit continuations.

Pure data: the store persists these as JSON (camelCase keys, as the seed's SQL runbook shows).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "CallKind",
    "Continuation",
    "PendingCall",
    "SessionState",
    "SessionStatus",
    "SubmitAnswer",
    "Tombstone",
    "args_digest",
    "batch_of",
    "is_batch_ready_at_last_submit",
    "stop_pending",
    "unanswered",
]

SessionStatus = Literal[
    "idle", "running", "suspended_client_tool", "completed", "failed", "interrupted"
]
CallKind = Literal["client", "approval"]


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    def dump(self) -> dict[str, Any]:
        """The stored JSON form (camelCase, no nulls)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class PendingCall(_Camel):
    """One call a turn waits on, stored in the owner's ``pending_client_tool_calls``."""

    tool_call_id: str
    tool_name: str
    input: dict[str, Any]
    run_id: str
    """The run that suspended on the call; fences later submits."""
    kind: CallKind
    index: int
    """The call's position in the model's call order (results land in this order)."""
    deadline_at: int
    """Absolute deadline, epoch milliseconds; a restart never extends it."""
    registered_at: int
    completed_retention_ms: int
    """The registering agent's tombstone retention, recorded so clearing never looks it up."""
    approval_id: str | None = None
    """For approvals: ``<runId>::<toolCallId>``."""
    args_digest: str | None = None
    """For approvals: digest of tool name and the exact input shown to the human."""
    submitted_at: int | None = None
    """When the answer was stored (epoch ms); ``None`` while unanswered."""
    response: dict[str, Any] | None = None
    """The stored answer: ``{"result": ...}``, ``{"error": ...}`` or an approval decision."""
    on_timeout: dict[str, Any] | None = None
    """What a lapse means, as the tool said when the call parked (``core/expiry.py``);
    ``None``: ``client_tool_timeout``."""
    policy: dict[str, Any] | None = None
    """For approvals: the tool's approval policy when the call parked, and the quorum's state
    as answers arrive (``core/approval_policy.py``); ``None``: one approver, anyone."""

    def lapsed_by(self, at_ms: int) -> bool:
        """Whether the deadline had passed at ``at_ms``."""
        return self.deadline_at <= at_ms


class Tombstone(_Camel):
    """A completed call's durable marker on the root (``completed_client_tool_calls``)."""

    completed_at: int
    outcome: Literal["answered", "timeout", "abandoned", "stopped", "not_executed"]
    run_id: str
    owner_session_id: str
    retention_ms: int


class SessionState(BaseModel):
    """One ``__agents_states`` row."""

    session_id: str
    agent_type: str
    root_session_id: str
    parent_session_id: str | None = None
    status: SessionStatus = "idle"
    run_id: str | None = None
    workflow_id: str | None = None
    version: int = 0
    pending: dict[str, PendingCall] = Field(default_factory=dict)
    ownership: dict[str, str] = Field(default_factory=dict)
    completed: dict[str, Tombstone] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    error: dict[str, Any] | None = None
    latest_checkpoint_id: str | None = None
    principal: str | None = None
    """Who started the session (the auth hook's ``principal``, as text); sub-agents inherit it."""
    tenant: str | None = None
    """The tenant the session was started under; sub-agents inherit it."""

    @property
    def is_root(self) -> bool:
        """Whether this session is the root of its tree."""
        return self.session_id == self.root_session_id


class Continuation(BaseModel):
    """What a stored submit caused (the seed's ``SubmitContinuation``)."""

    kind: Literal[
        "awaiting_batch", "awaiting_quorum", "new_run", "consumed", "caller_resumes", "deferred"
    ]
    """``awaiting_quorum``: an approval was counted; more approvers must approve."""
    run_id: str | None = Field(default=None, serialization_alias="runId")

    def dump(self) -> dict[str, Any]:
        """The wire form: ``{"kind": ..., "runId"?: ...}``."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class SubmitAnswer(BaseModel):
    """The answer of a submit: ``accepted``, ``already_completed`` or ``unknown_tool_call``."""

    status: Literal["accepted", "already_completed", "unknown_tool_call"]
    continuation: Continuation | None = None
    reason: str | None = None
    tool_call_id: str | None = None
    owner_workflow_id: str | None = Field(default=None, exclude=True)
    """The workflow the answer woke (never on the wire): lets the runtime see that the turn
    is parked in this process without another read."""
    continued_here: bool = Field(default=False, exclude=True)
    """The answer completed a hibernated turn's batch and this process started its
    continuation (never on the wire): nothing else needs to run it."""

    def dump(self) -> dict[str, Any]:
        """The wire form."""
        body: dict[str, Any] = {"status": self.status}
        if self.continuation is not None:
            body["continuation"] = self.continuation.dump()
        if self.reason is not None:
            body["reason"] = self.reason
        if self.tool_call_id is not None:
            body["toolCallId"] = self.tool_call_id
        return body


def stop_pending(owner: SessionState, root: SessionState, at_ms: int) -> list[PendingCall]:
    """Clear every pending call of ``owner``: its ownership entry on ``root`` goes, and a
    ``stopped`` tombstone takes its place (a late submit answers ``run_stopped``). Returns the
    calls cleared. Pure on the two states (a retried transaction may run it again)."""
    cleared = list(owner.pending.values())
    for entry in cleared:
        root.ownership.pop(entry.tool_call_id, None)
        root.completed[entry.tool_call_id] = Tombstone(
            completed_at=at_ms,
            outcome="stopped",
            run_id=entry.run_id,
            owner_session_id=owner.session_id,
            retention_ms=entry.completed_retention_ms,
        )
    owner.pending.clear()
    return cleared


def args_digest(tool_name: str, tool_input: Any) -> str:
    """SHA-256 of the tool name and canonical JSON input: what an approval is bound to."""
    canonical = json.dumps([tool_name, tool_input], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def batch_of(pending: dict[str, PendingCall], run_id: str) -> list[PendingCall]:
    """The calls of one run's batch, in the model's order."""
    return sorted((p for p in pending.values() if p.run_id == run_id), key=lambda p: p.index)


def unanswered(batch: list[PendingCall]) -> list[PendingCall]:
    """Calls without a stored answer."""
    return [p for p in batch if p.submitted_at is None]


def is_batch_ready_at_last_submit(batch: list[PendingCall]) -> bool:
    """The seed's rule: at the batch's last ``submittedAt``, every call is answered or lapsed.

    Decided at the last submit time, never by a reader's clock, with at least one answer.
    """
    submitted = [p.submitted_at for p in batch if p.submitted_at is not None]
    if not submitted:
        return False
    last = max(submitted)
    return all(p.submitted_at is not None or p.lapsed_by(last) for p in batch)
