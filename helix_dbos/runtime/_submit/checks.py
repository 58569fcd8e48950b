"""What a submit carries, and the checks of it that need no write.

``Submission`` is one answer (a client tool's result or error, or an approval decision) as
the Python API and the HTTP routes receive it. ``check_shape`` refuses a malformed or
oversized answer before anything is read (the seed's order: size first); ``response``
validates it against the pending call it answers and builds what is stored on the call's
entry. Both raise the typed refusals the submit contract answers; neither reads nor writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from ...core.approval_policy import IN_PROCESS, Decider, Tally, current_digest
from ...core.session import PendingCall, args_digest
from ...errors import (
    ApprovalMismatchError,
    ErrorCode,
    InvalidResultError,
    PayloadTooLargeError,
    RequestValidationError,
)
from ...observability.log import describe_issues, log_event
from .._context import RuntimeContext

__all__ = [
    "MISSING",
    "Submission",
    "check_shape",
    "log_decision",
    "measure_result_bytes",
    "validated_response",
]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Marks an absent ``result`` (``None`` is a valid result)."""


@dataclass(frozen=True)
class Submission:
    """One submit, as the Python API and the HTTP route receive it."""

    session_id: str
    tool_call_id: str
    kind: Literal["client-tool-result", "approval-response"] = "client-tool-result"
    result: Any = MISSING
    error: str | None = None
    approval_id: str | None = None
    approved: bool | None = None
    reason: str | None = None
    edited_input: dict[str, Any] | None = None
    shown_input: dict[str, Any] | None = None
    """For approvals: the arguments the human saw; must match the call's digest."""
    decider: Decider | None = None
    """For approvals: who decides, as the caller's credential established it (the HTTP layer
    from the authenticate hook or token, the CLI as the operator); ``None``: the in-process
    API, with no principal."""

    @property
    def needs_tool(self) -> bool:
        """Whether validating it needs the tool's definition (a result, or edited
        arguments); an error or a plain decision does not (the operator's CLI has none)."""
        if self.kind == "client-tool-result":
            return self.error is None
        return self.edited_input is not None


def measure_result_bytes(result: Any) -> int:
    """The UTF-8 byte length of the result's compact JSON (the submit size limit's measure).

    Raises:
        TypeError, ValueError: the result is not JSON (an object JSON cannot encode, NaN or
            Infinity, text with a lone surrogate).
    """
    encoded = json.dumps(result, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if "\x00" in encoded or "\\u0000" in encoded:
        # Postgres text and JSONB cannot hold NUL: such a result could never be stored.
        raise ValueError("NUL character")
    return len(encoded.encode("utf-8"))


def check_shape(sub: Submission, ctx: RuntimeContext) -> None:
    """Shape and size checks that need no read (nothing is read or stored before them).

    A submitted ``error`` string and a denial's ``reason`` count against the result size limit
    like a result does: each is stored, streamed and shown to the model.
    """
    if sub.kind == "client-tool-result":
        if (sub.result is MISSING) == (sub.error is None):
            raise RequestValidationError(
                "The submit is not a valid client-tool answer or approval",
                cause="result_or_error",
            )
        if sub.error is not None and "\x00" in sub.error:
            raise RequestValidationError(
                "The submit is not a valid client-tool answer or approval", cause="error_not_text"
            )
        if sub.error is None:
            try:
                size = measure_result_bytes(sub.result)
            except (TypeError, ValueError):
                # Not JSON: it could never be stored, so refuse it typed before any read.
                raise RequestValidationError(
                    "The submit is not a valid client-tool answer or approval",
                    cause="result_not_json",
                ) from None
        else:
            size = len(sub.error.encode("utf-8"))
    elif sub.approval_id is None or sub.approved is None:
        raise RequestValidationError(
            "The submit is not a valid client-tool answer or approval", cause="approval_fields"
        )
    else:
        size = len(sub.reason.encode("utf-8")) if sub.reason is not None else 0
    limit = ctx.settings.max_result_bytes
    if size > limit:
        log_event(
            "submit_tool_result.result_too_large",
            sessionId=sub.session_id,
            toolCallId=sub.tool_call_id,
            sizeBytes=size,
            limitBytes=limit,
        )
        raise PayloadTooLargeError("tool_result", limit, size)


def validated_response(
    sub: Submission,
    entry: PendingCall,
    ctx: RuntimeContext,
    tool_input_model: Any,
    output_model: Any,
) -> dict[str, Any]:
    """Validate the answer against the call and build what is stored on the entry."""
    if sub.kind == "client-tool-result":
        if entry.kind != "client":
            raise RequestValidationError(
                "This call awaits an approval-response, not a client-tool-result",
                toolCallId=sub.tool_call_id,
            )
        if sub.error is not None:
            return {"error": scrub(ctx, sub.error)}
        if output_model is not None:
            try:
                output_model.model_validate(sub.result)
            except ValidationError as exc:
                log_event(
                    "client_tool.validation_failed",
                    sessionId=sub.session_id,
                    toolCallId=sub.tool_call_id,
                    toolName=entry.tool_name,
                    code=ErrorCode.INVALID_RESULT.value,
                    # Where and why the result failed its schema; never the result itself.
                    error=describe_issues(exc.errors(include_url=False, include_input=False)),
                )
                raise InvalidResultError(
                    entry.tool_name, sub.tool_call_id, exc.errors(include_url=False)
                ) from None
        return {"result": sub.result}
    if entry.kind != "approval":
        raise RequestValidationError(
            "This call awaits a client-tool-result, not an approval-response",
            toolCallId=sub.tool_call_id,
        )
    if sub.approval_id != entry.approval_id:
        raise ApprovalMismatchError(
            "The approvalId does not match the pending approval", toolCallId=sub.tool_call_id
        )
    # Bound to the arguments as they stand: an edit under a quorum rebinds them.
    if sub.shown_input is not None and args_digest(
        entry.tool_name, sub.shown_input
    ) != current_digest(entry):
        raise ApprovalMismatchError(
            "The approval was given for other arguments than the call's",
            toolCallId=sub.tool_call_id,
        )
    decision: dict[str, Any] = {"approved": bool(sub.approved)}
    if sub.reason is not None:
        decision["reason"] = scrub(ctx, sub.reason)
    if sub.edited_input is not None:
        if not sub.approved:
            raise RequestValidationError("Edited arguments come with an approval, not a denial")
        try:
            tool_input_model.model_validate(sub.edited_input)
        except ValidationError:
            # The edit failed the tool's INPUT schema: not an invalid (output) result.
            raise RequestValidationError(
                "The edited arguments failed the tool's input schema",
                cause="edited_input",
                toolName=entry.tool_name,
                toolCallId=sub.tool_call_id,
            ) from None
        decision["editedInput"] = sub.edited_input
    return decision


def log_decision(
    sub: Submission, entry: PendingCall, tally: Tally, decision: dict[str, Any]
) -> None:
    """The log line of an approval's answer on record (after its commit)."""
    who = sub.decider or IN_PROCESS
    log_event(
        "approval.decided",
        sessionId=sub.session_id,
        toolCallId=sub.tool_call_id,
        toolName=entry.tool_name,
        approvalId=entry.approval_id,
        approved=bool(decision.get("approved")),
        final=tally.effect == "decided",
        votes=tally.votes,
        quorum=tally.quorum,
        principal=who.principal,
        credential=who.credential,
    )


def scrub(ctx: RuntimeContext, text: str) -> str:
    scrubber = ctx.scrubber
    return scrubber(text) if callable(scrubber) else text
