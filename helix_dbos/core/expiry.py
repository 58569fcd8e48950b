"""What a lapsed deadline means for a parked call (``define_tool(..., on_timeout=...)``).

A call that parks the turn (a client tool, or a server tool behind an approval) has a
deadline. When it passes without an answer the call has *expired*, and its tool's policy says
what the model reads:

* ``"error"`` (the default, for both): a failed result ``client_tool_timeout``.
* ``"deny"`` (approvals): a denial whose reason says the approval expired
  (``approval_expired``); the tool does not run.
* ``"approve"`` (approvals): the fixed decision to approve; the tool runs with the call's
  arguments, as if a human had approved them.
* ``DefaultResult(value)`` (client tools): ``value`` is the call's result, as if the client
  had sent it; it is validated against the tool's output model when the tool is defined.

The policy is recorded on the call's pending entry when the turn parks (``as_entry``), so a
lapse is resolved by the policy the call was made under, even after a deploy changed it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ..errors import ToolDefinitionError

__all__ = [
    "DefaultResult",
    "OnTimeout",
    "TimeoutAction",
    "check_on_timeout",
    "check_remind",
    "wait_outcome",
]

TimeoutAction = Literal["error", "deny", "approve", "result"]
"""The recorded name of a policy (``onTimeout.action`` on the pending entry)."""


@dataclass(frozen=True)
class DefaultResult:
    """A client tool's result when its deadline lapses: a JSON value or a pydantic model."""

    value: Any


OnTimeout = Literal["error", "deny", "approve"] | DefaultResult
"""What ``define_tool``'s ``on_timeout`` accepts."""


def check_on_timeout(
    name: str,
    on_timeout: OnTimeout | None,
    *,
    is_client: bool,
    require_approval: bool,
    output_model: type[BaseModel] | None,
) -> dict[str, Any] | None:
    """The recorded form of a tool's policy (``{"action": ...}``, with ``result`` for a
    default result), or ``None`` for the default (``"error"``).

    Raises:
        ToolDefinitionError: an unknown policy, a policy the tool's kind cannot have, or a
            default result that is not JSON or fails the tool's output model.
    """
    if on_timeout is None or on_timeout == "error":
        if on_timeout is not None and not (is_client or require_approval):
            raise _no_wait(name)
        return None
    if not (is_client or require_approval):
        raise _no_wait(name)
    if isinstance(on_timeout, DefaultResult):
        if not is_client:
            raise ToolDefinitionError(
                f"Tool {name!r}: a DefaultResult is for a client tool; an approval's lapse is "
                "'deny', 'approve' or 'error'",
                toolName=name,
            )
        return {"action": "result", "result": _default_value(name, on_timeout.value, output_model)}
    if on_timeout in ("deny", "approve"):
        if not require_approval:
            raise ToolDefinitionError(
                f"Tool {name!r}: on_timeout={on_timeout!r} is for an approval gate "
                "(require_approval=True); a client tool takes 'error' or a DefaultResult",
                toolName=name,
            )
        return {"action": on_timeout}
    raise ToolDefinitionError(
        f"Tool {name!r}: on_timeout must be 'error', 'deny', 'approve' or a DefaultResult, "
        f"not {on_timeout!r}",
        toolName=name,
    )


def check_remind(
    name: str, remind_before: float | None, timeout: float | None, *, suspends: bool
) -> float | None:
    """A tool's ``remind_before``, checked: a positive number of seconds, on a tool that parks,
    shorter than the tool's own deadline when it has one.

    Raises:
        ToolDefinitionError: any of those does not hold.
    """
    if remind_before is None:
        return None
    if isinstance(remind_before, bool) or not isinstance(remind_before, int | float):
        raise ToolDefinitionError(f"Tool {name!r}: remind_before must be a number of seconds")
    if not (0 < remind_before < float("inf")):
        raise ToolDefinitionError(f"Tool {name!r}: remind_before must be > 0 seconds")
    if not suspends:
        raise _no_wait(name, "remind_before")
    if timeout is not None and remind_before >= timeout:
        raise ToolDefinitionError(
            f"Tool {name!r}: remind_before ({remind_before} s) must be shorter than "
            f"client_tool_timeout ({timeout} s)",
            toolName=name,
        )
    return float(remind_before)


def _default_value(name: str, value: Any, output_model: type[BaseModel] | None) -> Any:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise ToolDefinitionError(
            f"Tool {name!r}: the DefaultResult is not a JSON value", toolName=name
        ) from None
    if output_model is not None:
        try:
            output_model.model_validate(value)
        except ValidationError as exc:
            raise ToolDefinitionError(
                f"Tool {name!r}: the DefaultResult fails the output model: "
                f"{exc.errors(include_url=False, include_input=False)}",
                toolName=name,
            ) from None
    return value


def _no_wait(name: str, option: str = "on_timeout") -> ToolDefinitionError:
    return ToolDefinitionError(
        f"Tool {name!r}: {option} is for a tool that waits (a client tool or an approval gate)",
        toolName=name,
    )


def wait_outcome(result: Mapping[str, Any]) -> str | None:
    """How a committed tool result's wait ended (for the stream, the log and the metrics), or
    ``None`` if it did not wait.

    ``answered`` (a client's result or error, or an approval given), ``denied`` (an approval
    refused), ``expired`` (the deadline lapsed), ``abandoned`` (a new message dropped it).
    """
    if not result.get("suspended"):
        return None
    outcome = result.get("outcome")
    if outcome == "answered":
        return "denied" if result.get("errorCode") == "approval_denied" else "answered"
    if outcome in ("timeout", "expired"):
        return "expired"
    if outcome == "abandoned":
        return "abandoned"
    return None  # not_executed: the call never waited
