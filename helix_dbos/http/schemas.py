"""Request and response models of the HTTP API (the wire is camelCase JSON).

Request models are strict and forbid unknown keys: a typo in a field name is refused rather
than silently ignored. Bodies are parsed from raw bytes by the router (see ``body.py``) and then
validated against these models, so every refusal is a typed error body.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from ..runtime import MISSING, Submission
from .body_variants import (
    NO_NUL_PATTERN,
    chat_submit_variants,
    resume_variants,
    submit_variants,
)

__all__ = [
    "CheckpointView",
    "CompanionView",
    "CheckpointsResponse",
    "ControlRequest",
    "ControlResponse",
    "IDENTIFIER_MAX_LENGTH",
    "IDENTIFIER_PATTERN",
    "ErrorBody",
    "Identifier",
    "PendingToolCallView",
    "ResumeRequest",
    "RetryRequest",
    "StartRequest",
    "StartResponse",
    "StatusResponse",
    "SubmitAnswerBody",
    "SubmitContinuationBody",
    "SubmitToolResultRequest",
    "Text",
    "TurnResponse",
    "UnknownToolCallBody",
]

# Ids end up in SQL parameters, workflow ids and log lines: printable text, bounded length.
# (Postgres refuses NUL in text; control characters have no place in an id.)
IDENTIFIER_MAX_LENGTH = 256
IDENTIFIER_PATTERN = r"^[^\x00-\x1f\x7f]+$"
Identifier = Annotated[
    str,
    StringConstraints(min_length=1, max_length=IDENTIFIER_MAX_LENGTH, pattern=IDENTIFIER_PATTERN),
]
"""A session, tool-call, approval or agent id."""
Text = Annotated[str, StringConstraints(pattern=NO_NUL_PATTERN)]
"""Free text (a message, a reason): any string without a NUL character, which the store cannot
keep (the body parser refuses one anywhere in a body; the document says so on each field)."""

# One character that is not blank: not whitespace, not a control character. Spelled as explicit
# ranges, so the document's pattern means the same in every regex engine.
_BLANK = r"\x00-\x20\x7f-\xa0\u1680\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff"
NOT_BLANK_PATTERN = rf"^[^\x00]*[^{_BLANK}][^\x00]*$"


def _not_blank(value: str) -> str:
    if "\x00" not in value and not re.fullmatch(NOT_BLANK_PATTERN, value):
        raise PydanticCustomError("blank", "The message is empty or only whitespace")
    return value


Message = Annotated[
    str,
    StringConstraints(pattern=NO_NUL_PATTERN),
    AfterValidator(_not_blank),
    Field(json_schema_extra={"pattern": NOT_BLANK_PATTERN}),
]
"""A user's message: text without a NUL that is not empty or only whitespace (refused as
``blank``: a model has nothing to answer)."""


class _Request(BaseModel):
    # use_attribute_docstrings: the field docstrings describe the fields in /docs too.
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=False,
        extra="forbid",
        strict=True,
        use_attribute_docstrings=True,
    )


class _Response(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


# -- requests -------------------------------------------------------------------------------


class StartRequest(_Request):
    """``POST /start``: a new session, or the next turn of an ended session."""

    session_field: ClassVar[str] = "session_id"

    agent_type: Identifier
    """The registered agent to run."""
    message: Message
    """The user's message: not empty, not only whitespace."""
    session_id: Identifier | None = None
    """An existing session to continue; omitted, the server makes a new id."""


class ResumeRequest(_Request):
    """``POST /resume``: continue a parked session, or deliver a new message over it."""

    session_field: ClassVar[str] = "session_id"

    # The document describes one arm per mode (what the validator below enforces).
    model_config = ConfigDict(json_schema_extra=resume_variants)

    session_id: Identifier
    mode: Literal["continue", "with_message", "from_checkpoint"] = "continue"
    """``continue`` adopts the continuation of a complete batch; ``with_message`` sends
    ``message`` as the next user message; ``from_checkpoint`` rewinds to ``checkpointId``."""
    message: Message | None = None
    """Required with ``with_message``; refused with ``continue``."""
    abandon_pending: bool = False
    """With ``with_message``: answer every unanswered call ``client_tool_abandoned``."""
    checkpoint_id: Identifier | None = None
    """Required with ``from_checkpoint`` (and refused otherwise)."""

    @model_validator(mode="after")
    def _mode_fields(self) -> ResumeRequest:
        if (self.mode == "from_checkpoint") != (self.checkpoint_id is not None):
            raise ValueError("from_checkpoint needs a checkpointId, and only it takes one")
        if self.mode == "from_checkpoint" and (self.message is not None or self.abandon_pending):
            raise ValueError("from_checkpoint takes no message and no abandonPending")
        if self.mode == "with_message" and self.message is None:
            raise ValueError("with_message needs a message")
        if self.mode == "continue" and (self.message is not None or self.abandon_pending):
            raise ValueError("continue takes no message and no abandonPending")
        return self


class RetryRequest(_Request):
    """``POST /retry``: re-run a failed or interrupted turn (rules: docs/lifecycle.md)."""

    session_field: ClassVar[str] = "session_id"

    session_id: Identifier
    message: Message | None = None
    """Needed when the failed run committed steps; replaces its input otherwise."""
    checkpoint_id: Identifier | None = None
    """Retry from this checkpoint: the conversation as it was there, then the input after it."""


class CheckpointView(_Response):
    """One checkpoint a rewind or retry can go back to."""

    checkpoint_id: str
    run_id: str | None
    step: int
    """Model answers in the conversation at this checkpoint."""
    created_at: str
    message_count: int
    """Messages in the conversation a rewind to it restores."""
    kind: str
    """The step that wrote it: ``model``, ``results``, ``finish``, ``lifecycle`` ..."""


class CheckpointsResponse(_Response):
    """``GET /checkpoints``: the session's checkpoints, newest first."""

    session_id: str
    checkpoints: list[CheckpointView]


class ControlRequest(_Request):
    """``POST /interrupt`` and ``POST /abort``."""

    session_field: ClassVar[str] = "session_id"

    session_id: Identifier
    reason: Annotated[str, StringConstraints(max_length=2000, pattern=NO_NUL_PATTERN)] | None = None
    """For an abort: recorded in the session's error (``framework_cancelled``)."""


class SubmitToolResultRequest(_Request):
    """``POST /submit-tool-result``: a client tool's answer or a human's approval decision.

    ``kind`` selects the variant. ``client-tool-result`` (the default) carries exactly one of
    ``result`` (any JSON, ``null`` included) or ``error``. ``approval-response`` carries
    ``approvalId`` (from the ``tool_approval_request`` event) and ``approved``, optionally
    ``reason``, ``editedInput`` (approved arguments that replace the model's) and ``input``
    (the arguments the human was shown; the approval is refused if they are not the call's).
    """

    session_field: ClassVar[str] = "session_id"

    # The document describes one arm per kind (what the validator below enforces).
    model_config = ConfigDict(json_schema_extra=submit_variants)

    kind: Literal["client-tool-result", "approval-response"] = "client-tool-result"
    session_id: Identifier
    """The ROOT session (a sub-agent's call is routed to its owner)."""
    tool_call_id: Identifier
    result: Any = None
    error: Text | None = None
    approval_id: Identifier | None = None
    approved: bool | None = None
    reason: Text | None = None
    edited_input: dict[str, Any] | None = None
    input: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _variant(self) -> SubmitToolResultRequest:
        has_result = "result" in self.model_fields_set
        approval_fields = (
            self.approval_id,
            self.approved,
            self.reason,
            self.edited_input,
            self.input,
        )
        if self.kind == "client-tool-result":
            if has_result == (self.error is not None):
                raise ValueError("a client-tool-result carries exactly one of result or error")
            if any(f is not None for f in approval_fields):
                raise ValueError("approval fields belong to an approval-response")
        else:
            if self.approval_id is None or self.approved is None:
                raise ValueError("an approval-response needs approvalId and approved")
            if has_result or self.error is not None:
                raise ValueError("an approval-response carries no result or error")
        return self

    @property
    def has_result(self) -> bool:
        """Whether ``result`` was given (``null`` is a valid result)."""
        return "result" in self.model_fields_set

    def submission(self, session_id: str) -> Submission:
        """The runtime's ``Submission`` of this body for ``session_id``."""
        return Submission(
            session_id=session_id,
            tool_call_id=self.tool_call_id,
            kind=self.kind,
            result=self.result if self.has_result else MISSING,
            error=self.error,
            approval_id=self.approval_id,
            approved=self.approved,
            reason=self.reason,
            edited_input=self.edited_input,
            shown_input=self.input,
        )


class ChatSubmitToolResultRequest(SubmitToolResultRequest):
    """``POST /chat/{id}/submit-tool-result``: the session is the path's ``id``."""

    model_config = ConfigDict(json_schema_extra=chat_submit_variants)

    session_id: Identifier | None = None  # type: ignore[assignment]
    """Optional here; when given it must equal the path's id."""


# -- responses ------------------------------------------------------------------------------


class ErrorBody(_Response):
    """Every refusal: ``{error, code, retryable, ...}`` plus the error's typed fields."""

    model_config = ConfigDict(extra="allow")

    error: str
    """A human-readable message (fixed for validation errors: it never reveals a schema)."""
    code: str
    """The stable machine code (``validation_error``, ``state_run_superseded``, ...)."""
    retryable: bool
    """Whether the same request may succeed later unchanged."""


class TurnResponse(_Response):
    """``{sessionId, runId}``: the run an entry started (or adopted)."""

    session_id: str
    run_id: str


class StartResponse(TurnResponse):
    """``/start``'s answer; ``token`` is present when session tokens are enabled."""

    token: str | None = None
    """A short-lived token bound to ``sessionId``: send it as ``Authorization: Bearer``."""
    delivery: Literal["started", "delivered"] | None = None
    """A persistent agent's session only: ``started`` (a new workflow runs the turn) or
    ``delivered`` (the session's live workflow took the message from its inbox)."""


class PendingToolCallView(_Response):
    """One call a session waits on (sub-agents' calls are listed on the root)."""

    tool_call_id: str
    tool_name: str
    input: dict[str, Any]
    deadline_at: int
    """Epoch milliseconds."""
    kind: Literal["client", "approval"]
    owner_session_id: str
    approval_id: str | None = None
    submitted_at: int | None = None
    """Set once an answer is stored (the turn has not consumed it yet)."""


class StatusResponse(_Response):
    """``GET /status``."""

    session_id: str
    status: Literal[
        "idle", "running", "suspended_client_tool", "completed", "failed", "interrupted"
    ]
    run_id: str | None
    pending_tool_calls: list[PendingToolCallView]
    waiting_for: list[Literal["approval", "client_tool"]]
    """What the unanswered calls wait for: a human's ``approval``, the client running a
    ``client_tool``, or both (in that order); ``[]`` when no call waits for an answer."""
    error: dict[str, Any] | None = None
    principal: str | None = None
    """Who started the session (absent when it was started without one)."""
    tenant: str | None = None
    """The tenant the session was started under (absent when none)."""
    companions: list[CompanionView] | None = None
    """The session's companions (absent when it has none): docs/companions.md."""


class CompanionView(_Response):
    """One companion in ``GET /status``."""

    companion: str
    session_id: str
    state: Literal["not_started", "running", "waiting", "idle", "hibernated", "stopped", "ended"]
    status: str | None = None
    run_id: str | None = None


class ControlResponse(_Response):
    """``/interrupt`` and ``/abort``: the session after the stop."""

    session_id: str
    status: str
    run_id: str | None


class SubmitContinuationBody(_Response):
    """What a stored answer caused (``new_run`` carries the continuing run)."""

    kind: Literal[
        "awaiting_batch", "awaiting_quorum", "new_run", "consumed", "caller_resumes", "deferred"
    ]
    run_id: str | None = None


class SubmitAnswerBody(_Response):
    """200 ``accepted`` or ``already_completed``, each with its continuation."""

    status: Literal["accepted", "already_completed"]
    continuation: SubmitContinuationBody
    tool_call_id: str | None = None


class UnknownToolCallBody(_Response):
    """404: no pending call matches (``reason`` ``run_stopped`` after a stop).

    ``status`` is the seed's field; ``error``/``code``/``retryable`` make it a typed refusal too.
    """

    status: Literal["unknown_tool_call"]
    reason: str | None = None
    tool_call_id: str | None = None
    error: str
    code: Literal["unknown_tool_call"]
    retryable: bool
