"""Who may decide an approval, and how many must: the policy of an approval tool.

``define_tool(..., require_approval=True, approval_policy=ApprovalPolicy(...))`` declares it;
``check_policy`` checks it at once (``ToolDefinitionError``) and gives its recorded form, which
the park writes on the call's pending entry (``policy``), so a call is decided by the policy it
was made under, even after a deploy changed the tool. The entry's ``policy`` also holds the
quorum's state as the answers arrive (``votes``, ``digest``, ``editedInput``, ``decisions``).

* **Four eyes**: the principal who started the session may not decide its approval (refused
  ``approval_self_decision``, 403), and a decider with no principal cannot prove it is
  someone else (``approval_decider_unknown``).
* **Quorum**: ``quorum`` distinct principals must approve the same arguments before the tool
  runs. One denial denies. A principal counts once; an edit of the arguments restarts the
  count on the edited arguments (the editor's approval is its first vote).
* **Roles**: with ``roles``, a decider must hold one of them (the authenticate hook's
  ``roles``); ``escalate_after`` seconds after the call parked, ``escalate_to``'s roles may
  answer too. The operator's CLI decides whatever the roles (it holds the database).

``Decider`` is who answered, as the credential established it: never as a request body claims.
Everything here is pure: a retried transaction may run it again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ApprovalForbiddenError, ErrorCode, ToolDefinitionError
from .events import event
from .session import PendingCall, args_digest

__all__ = [
    "CREDENTIALS",
    "IN_PROCESS",
    "ApprovalPolicy",
    "Credential",
    "Decider",
    "Tally",
    "check_decider",
    "check_policy",
    "counted_event",
    "current_digest",
    "eligible_roles",
    "entry_policy",
    "quorum_state",
    "tally",
]

Credential = Literal[
    "hook",
    "session_token",
    "approver_token",
    "operator_cli",
    "in_process",
    "deadline",
    "unauthenticated",
]
"""How the decider was established: the app's authenticate hook, a session token, an approver
token, the operator's CLI, the in-process Python API, the deadline (an expiry's policy), or
nothing (routes served with ``allow_unauthenticated``)."""
CREDENTIALS: tuple[str, ...] = (
    "hook",
    "session_token",
    "approver_token",
    "operator_cli",
    "in_process",
    "deadline",
    "unauthenticated",
)


@dataclass(frozen=True)
class Decider:
    """Who decided an approval: principal and tenant as the credential established them, the
    credential's kind, and the roles the authenticate hook answered."""

    principal: str | None = None
    tenant: str | None = None
    credential: Credential = "in_process"
    roles: tuple[str, ...] = ()

    def dump(self) -> dict[str, Any]:
        """The recorded form (camelCase; no empty fields but ``credential``)."""
        out: dict[str, Any] = {"credential": self.credential}
        if self.principal is not None:
            out["principal"] = self.principal
        if self.tenant is not None:
            out["tenant"] = self.tenant
        if self.roles:
            out["roles"] = list(self.roles)
        return out


IN_PROCESS = Decider()
"""The decider of an answer given through the Python API without one."""


@dataclass(frozen=True)
class ApprovalPolicy:
    """Who may decide an approval tool's calls, and how many must approve."""

    four_eyes: bool = False
    """The session's own principal may not decide its approval."""
    quorum: int = 1
    """Distinct principals that must approve the same arguments."""
    roles: tuple[str, ...] = ()
    """A decider must hold one of these roles (empty: any role, or none)."""
    escalate_after: float | None = None
    """Seconds after the call parked from which ``escalate_to`` may answer too."""
    escalate_to: tuple[str, ...] = field(default=())
    """The roles that may answer once escalated."""


def _texts(name: str, what: str, values: Iterable[str]) -> list[str]:
    out = list(values)
    if isinstance(values, str) or not all(isinstance(v, str) and v for v in out):
        raise ToolDefinitionError(
            f"Tool {name!r}: {what} must be a tuple of non-empty strings", toolName=name
        )
    return out


def check_policy(
    name: str,
    policy: ApprovalPolicy | None,
    *,
    require_approval: bool,
    timeout: float | None,
) -> dict[str, Any] | None:
    """The recorded form of a tool's approval policy (``None``: a single approver, anyone).

    Raises:
        ToolDefinitionError: a policy on a tool that is no approval gate, a quorum that is not
            a positive integer, bad roles, an escalation without roles or after the deadline.
    """
    if policy is None:
        return None
    if not isinstance(policy, ApprovalPolicy):
        raise ToolDefinitionError(f"Tool {name!r}: approval_policy must be an ApprovalPolicy")
    if not require_approval:
        raise ToolDefinitionError(
            f"Tool {name!r}: approval_policy is for an approval gate (require_approval=True)",
            toolName=name,
        )
    quorum = policy.quorum
    if isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= 100:
        raise ToolDefinitionError(
            f"Tool {name!r}: quorum must be an integer from 1 to 100", toolName=name
        )
    recorded: dict[str, Any] = {"fourEyes": bool(policy.four_eyes), "quorum": quorum}
    roles = _texts(name, "roles", policy.roles)
    escalate_to = _texts(name, "escalate_to", policy.escalate_to)
    if roles:
        recorded["roles"] = roles
    if policy.escalate_after is None:
        if escalate_to:
            raise ToolDefinitionError(
                f"Tool {name!r}: escalate_to needs escalate_after", toolName=name
            )
        return recorded
    _check_escalation(name, policy.escalate_after, roles, escalate_to, timeout)
    recorded.update(escalateAfter=float(policy.escalate_after), escalateTo=escalate_to)
    return recorded


def _check_escalation(
    name: str, after: float, roles: list[str], escalate_to: list[str], timeout: float | None
) -> None:
    if isinstance(after, bool) or not isinstance(after, int | float) or not 0 < after < 1e9:
        raise ToolDefinitionError(f"Tool {name!r}: escalate_after must be > 0 seconds")
    if not roles or not escalate_to:
        raise ToolDefinitionError(
            f"Tool {name!r}: an escalation names the roles that answer first (roles) and "
            "the further group (escalate_to)",
            toolName=name,
        )
    if timeout is not None and after >= timeout:
        raise ToolDefinitionError(
            f"Tool {name!r}: escalate_after ({after} s) must come before the deadline "
            f"(client_tool_timeout, {timeout} s)",
            toolName=name,
        )


def entry_policy(recorded: dict[str, Any] | None, registered_at: int) -> dict[str, Any] | None:
    """The policy as a parked call records it: with the escalation's absolute time."""
    if recorded is None:
        return None
    out = dict(recorded)
    after = out.pop("escalateAfter", None)
    if after is not None:
        out["escalateAt"] = registered_at + int(after * 1000)
    return out


def current_digest(entry: PendingCall) -> str | None:
    """The digest an approval of ``entry`` is bound to now: an edit's, once a quorum's
    approver edited the arguments, else the call's."""
    policy = entry.policy or {}
    return policy.get("digest") or entry.args_digest


def eligible_roles(policy: dict[str, Any], at: int) -> set[str] | None:
    """The roles that may decide at ``at`` (``None``: anyone)."""
    roles = policy.get("roles")
    if not roles:
        return None
    allowed = set(roles)
    escalate_at = policy.get("escalateAt")
    if escalate_at is not None and at >= escalate_at:
        allowed.update(policy.get("escalateTo") or ())
    return allowed


def check_decider(entry: PendingCall, owner_principal: str | None, who: Decider, at: int) -> None:
    """Refuse a decider the call's policy does not allow (nothing is written).

    Raises:
        ApprovalForbiddenError: 403, ``approval_self_decision`` (four eyes),
            ``approval_decider_unknown`` (no principal where one must be told apart) or
            ``approval_not_eligible`` (none of the roles that may decide now).
    """
    policy = entry.policy
    if not policy:
        return
    tcid = entry.tool_call_id
    needs_name = policy.get("fourEyes") or int(policy.get("quorum", 1)) > 1
    if needs_name and who.principal is None:
        raise ApprovalForbiddenError(
            "This approval needs a decider with a principal",
            ErrorCode.APPROVAL_DECIDER_UNKNOWN,
            toolCallId=tcid,
        )
    if policy.get("fourEyes") and who.principal == owner_principal:
        raise ApprovalForbiddenError(
            "The session's own principal may not decide its approval (four eyes)",
            ErrorCode.APPROVAL_SELF_DECISION,
            toolCallId=tcid,
        )
    allowed = eligible_roles(policy, at)
    if allowed is None or who.credential == "operator_cli":
        return
    if allowed.isdisjoint(who.roles):
        raise ApprovalForbiddenError(
            "The decider holds none of the roles that may decide this approval now",
            ErrorCode.APPROVAL_NOT_ELIGIBLE,
            toolCallId=tcid,
            roles=sorted(allowed),
        )


@dataclass(frozen=True)
class Tally:
    """What one answer did to an approval under a policy.

    ``decided``: the call's answer is stored (approved by the quorum, or denied). ``counted``:
    a partial approval was recorded; the call stays parked. ``repeat``: this principal's
    approval of these arguments was counted already; nothing changed.
    """

    effect: Literal["decided", "counted", "repeat"]
    votes: int
    quorum: int
    digest: str | None
    edited_digest: str | None = None


def quorum_state(entry: PendingCall) -> tuple[int, int]:
    """``(approvals counted on the current arguments, approvals needed)``."""
    policy = entry.policy or {}
    return len(policy.get("votes") or ()), int(policy.get("quorum", 1))


def tally(entry: PendingCall, decision: dict[str, Any], who: Decider, at: int) -> Tally:
    """Count ``decision`` (the validated answer, ``{"approved", "reason"?, "editedInput"?}``)
    on ``entry`` in place, and store the call's answer once it is decided.

    A denial decides at once. An approval counts once per principal on the current arguments;
    an edit to other arguments restarts the count on them. The stored answer carries
    ``decidedBy`` (the last decider) and, under a quorum, ``approvers``.
    """
    policy = entry.policy = dict(entry.policy or {})
    need = int(policy.get("quorum", 1))
    policy["decisions"] = int(policy.get("decisions", 0)) + 1
    digest = current_digest(entry)
    edited: str | None = None
    if "editedInput" in decision:
        edited = args_digest(entry.tool_name, decision["editedInput"])
    if not decision.get("approved"):
        return _decided(entry, decision, who, at, Tally("decided", 0, need, digest))
    votes: list[dict[str, Any]] = list(policy.get("votes") or ())
    if edited is not None and edited != digest:
        votes, digest = [], edited
        policy.update(digest=edited, editedInput=decision["editedInput"])
    if any(v.get("principal") == who.principal for v in votes) and who.principal is not None:
        policy["decisions"] -= 1
        return Tally("repeat", len(votes), need, digest, edited)
    votes.append({**who.dump(), "at": at})
    policy["votes"] = votes
    if len(votes) < need:
        return Tally("counted", len(votes), need, digest, edited)
    if "editedInput" in policy:
        decision = {**decision, "editedInput": policy["editedInput"]}
    if need > 1:
        decision = {**decision, "approvers": [v.get("principal") for v in votes]}
    return _decided(entry, decision, who, at, Tally("decided", len(votes), need, digest, edited))


def counted_event(entry: PendingCall) -> dict[str, Any]:
    """The ``tool_approval_counted`` event of an approval a quorum counted (the stream shows
    the quorum's progress)."""
    votes, needed = quorum_state(entry)
    return event(
        "tool_approval_counted",
        toolCallId=entry.tool_call_id,
        toolName=entry.tool_name,
        approvalId=entry.approval_id,
        approvals=votes,
        needed=needed,
        approvers=[v.get("principal") for v in (entry.policy or {}).get("votes", [])],
        argsDigest=current_digest(entry),
    )


def _decided(
    entry: PendingCall, decision: dict[str, Any], who: Decider, at: int, result: Tally
) -> Tally:
    entry.submitted_at = at
    entry.response = {**decision, "decidedBy": who.dump()}
    return result
