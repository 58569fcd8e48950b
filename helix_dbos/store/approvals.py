"""The approval inbox: pending approvals across sessions, oldest first, a page at a time.

The rows come from ``__agents_approvals`` (revision 0008): one row per approval a human can
answer now, kept by triggers from the session rows' pending maps in the same transaction as
every write of a map. Nothing here writes it. Each filter has an index whose key after the
filtered column is the page's order ``(registered_at, session_id, tool_call_id)``, so a page is
a short range scan however many approvals wait; the cursor is that key of the page's last row.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, computed_field
from pydantic.alias_generators import to_camel

from ..core.owner import SessionOwner
from ..errors import RequestValidationError
from .schema import approvals, states
from .store import SessionStore

__all__ = [
    "APPROVALS_PAGE_DEFAULT",
    "APPROVALS_PAGE_MAX",
    "CURSOR_PATTERN",
    "ApprovalPage",
    "ApprovalQuery",
    "PendingApproval",
    "SessionOwner",
    "decode_cursor",
    "encode_cursor",
    "find_approval",
    "inbox_statement",
    "list_approvals",
    "session_owner",
]

#: A page's size unless the caller names one, and the most it may name.
APPROVALS_PAGE_DEFAULT = 50
APPROVALS_PAGE_MAX = 500

#: The shape of a cursor: the order key of a page's last row (see ``encode_cursor``).
CURSOR_PATTERN = r"^[0-9]{1,16}\.(?:[0-9a-f]{2}){1,4096}\.(?:[0-9a-f]{2}){1,4096}$"
_CURSOR = re.compile(CURSOR_PATTERN.strip("^$"))

_ORDER = (approvals.c.registered_at, approvals.c.session_id, approvals.c.tool_call_id)
_INVALID_CURSOR = "The cursor is not one this inbox gives out"


class PendingApproval(BaseModel):
    """One approval waiting for a human."""

    # Declared once: the inbox's rows, and (named ``PendingApprovalView``) the wire shape of
    # ``GET /approvals`` in the OpenAPI document; camelCase on the wire.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    approval_id: str
    """Send it back with the answer (``approvalId`` of an ``approval-response``)."""
    tool_call_id: str
    tool_name: str
    input: Any
    """The arguments the human approves (the answer may send them back as ``input``)."""
    args_digest: str | None
    """SHA-256 of the tool name and the arguments: what the approval is bound to."""
    session_id: str
    """The session whose turn raised the call (a sub-agent's, or the root's)."""
    root_session_id: str
    """The session to answer on (``/submit-tool-result``'s ``sessionId``)."""
    run_id: str
    agent_type: str
    principal: str | None
    """Who started the session."""
    tenant: str | None
    created_at: int
    """When the call parked, epoch milliseconds."""
    deadline_at: int
    """When it expires, epoch milliseconds."""
    age_ms: int
    """How long it has waited, at the time of the listing."""
    policy: dict[str, Any] | None = Field(default=None, exclude=True)
    """The call's approval policy and its quorum's state (``core/approval_policy.py``);
    ``None``: one approver, anyone. Not on the wire: ``quorum`` says what a client needs."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def quorum(self) -> dict[str, Any] | None:
        """Under an approval policy, its progress: ``{approvals, needed, approvers, text ("1 of
        2"), fourEyes, edited?, roles?, escalateAt?, escalateTo?, escalated?}`` (as of the
        listing); ``null`` for one approver, anyone."""
        if self.policy is None:
            return None
        votes = self.policy.get("votes") or []
        needed = int(self.policy.get("quorum", 1))
        out: dict[str, Any] = {
            "approvals": len(votes),
            "needed": needed,
            "approvers": [v.get("principal") for v in votes],
            "text": f"{len(votes)} of {needed}",
            "fourEyes": bool(self.policy.get("fourEyes")),
        }
        if "editedInput" in self.policy:
            out["edited"] = True  # ``input`` and ``argsDigest`` are the edit's
        if self.policy.get("roles"):
            out["roles"] = self.policy["roles"]
        escalate_at = self.policy.get("escalateAt")
        if escalate_at is not None:
            out.update(
                escalateAt=escalate_at,
                escalateTo=self.policy.get("escalateTo"),
                escalated=self.created_at + self.age_ms >= escalate_at,
            )
        return out

    def dump(self) -> dict[str, Any]:
        """The wire form (camelCase)."""
        return self.model_dump(by_alias=True)


@dataclass(frozen=True)
class ApprovalPage:
    """A page of the inbox, and the cursor of the next one (``None``: this is the last)."""

    approvals: list[PendingApproval]
    next_cursor: str | None

    def dump(self) -> dict[str, Any]:
        """The wire form: ``{approvals, nextCursor}``."""
        return {"approvals": [a.dump() for a in self.approvals], "nextCursor": self.next_cursor}


@dataclass(frozen=True)
class ApprovalQuery:
    """What to list. Every filter given must hold (they combine with AND).

    ``session_id`` matches the session that raised the call or its root. ``older_than_ms``:
    waited at least that long. ``deadline_before``: expires before that time (epoch ms).
    """

    tool: str | None = None
    session_id: str | None = None
    principal: str | None = None
    tenant: str | None = None
    older_than_ms: int | None = None
    deadline_before: int | None = None
    limit: int = APPROVALS_PAGE_DEFAULT
    cursor: str | None = None
    viewer: str | None = None
    """The principal who asks: an approval four eyes bar it from deciding (its own session's)
    is not offered to it."""


def encode_cursor(key: tuple[int, str, str]) -> str:
    """The cursor of a row's order key: ``<registered_at>.<hex session id>.<hex call id>``."""
    registered_at, session_id, tool_call_id = key
    return f"{registered_at}.{session_id.encode().hex()}.{tool_call_id.encode().hex()}"


def decode_cursor(cursor: str) -> tuple[int, str, str]:
    """The order key in a cursor. Any text of ``CURSOR_PATTERN`` is a position in the order
    (one no page gave out just starts the page there), so only the shape is checked.

    Raises:
        RequestValidationError: ``cause: cursor``: not of the cursor's shape.
    """
    if not isinstance(cursor, str) or _CURSOR.fullmatch(cursor) is None:
        raise RequestValidationError(_INVALID_CURSOR, cause="cursor")
    registered_at, session_hex, call_hex = cursor.split(".")
    return int(registered_at), _unhex(session_hex), _unhex(call_hex)


def _unhex(text: str) -> str:
    # NUL cannot reach a SQL parameter (Postgres text refuses it); nor can a lone byte.
    return bytes.fromhex(text).decode("utf-8", "replace").replace("\x00", "\ufffd")


def inbox_statement(query: ApprovalQuery, now: int) -> sa.Select[Any]:
    """The inbox's SELECT for ``query`` as of ``now`` (epoch ms), ordered, without its
    limit: what ``list_approvals`` runs (and what a test EXPLAINs)."""
    c = approvals.c
    # A lapsed approval can no longer be answered (a submit gets deadline_lapsed); its turn
    # expires it at once, and the trigger takes its row out.
    select = sa.select(approvals).where(c.deadline_at > now)
    if query.tool is not None:
        select = select.where(c.tool_name == query.tool)
    if query.session_id is not None:
        select = select.where(
            sa.or_(c.session_id == query.session_id, c.root_session_id == query.session_id)
        )
    if query.principal is not None:
        select = select.where(c.principal == query.principal)
    if query.tenant is not None:
        select = select.where(c.tenant == query.tenant)
    if query.older_than_ms is not None:
        select = select.where(c.registered_at <= now - query.older_than_ms)
    if query.deadline_before is not None:
        select = select.where(c.deadline_at < query.deadline_before)
    if query.viewer is not None:
        barred = c.barred_principal
        select = select.where(sa.or_(barred.is_(None), barred != query.viewer))
    if query.cursor is not None:
        select = select.where(sa.tuple_(*_ORDER) > sa.tuple_(*decode_cursor(query.cursor)))
    return select.order_by(*_ORDER)


def _approval(row: Any, now: int) -> PendingApproval:
    m = row._mapping
    value, policy = m["input"], m["policy"]
    policy = json.loads(policy) if isinstance(policy, str) else policy
    edited = policy is not None and "editedInput" in policy
    return PendingApproval(
        approval_id=m["approval_id"],
        tool_call_id=m["tool_call_id"],
        tool_name=m["tool_name"],
        # Under a quorum an edit rebinds the approval: what is approved now is the edit.
        input=policy["editedInput"] if edited else _json(value),
        args_digest=policy["digest"] if edited else m["args_digest"],
        session_id=m["session_id"],
        root_session_id=m["root_session_id"],
        run_id=m["run_id"],
        agent_type=m["agent_type"],
        principal=m["principal"],
        tenant=m["tenant"],
        created_at=int(m["registered_at"]),
        deadline_at=int(m["deadline_at"]),
        age_ms=max(0, now - int(m["registered_at"])),
        policy=policy,
    )


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _check(query: ApprovalQuery) -> None:
    if not 1 <= query.limit <= APPROVALS_PAGE_MAX:
        raise RequestValidationError(
            f"limit must be between 1 and {APPROVALS_PAGE_MAX}", cause="limit"
        )
    for name in ("older_than_ms", "deadline_before"):
        value = getattr(query, name)
        if value is not None and value < 0:
            raise RequestValidationError(f"{name} must not be negative", cause=name)


async def list_approvals(store: SessionStore, query: ApprovalQuery, now: int) -> ApprovalPage:
    """One page of the pending approvals matching ``query``, oldest first, as of ``now``
    (epoch ms).

    Raises:
        RequestValidationError: a limit out of range, a negative duration, a bad cursor.
    """
    _check(query)
    select = inbox_statement(query, now).limit(query.limit + 1)
    async with store.transaction() as conn:
        rows = (await conn.execute(select)).all()
    page = [_approval(r, now) for r in rows[: query.limit]]
    more = len(rows) > query.limit
    last = page[-1] if page and more else None
    cursor = encode_cursor((last.created_at, last.session_id, last.tool_call_id)) if last else None
    return ApprovalPage(page, cursor)


async def find_approval(store: SessionStore, approval_id: str, now: int) -> PendingApproval | None:
    """The pending approval ``approval_id`` names, if it is in the inbox now (``None``: no
    such approval waits: answered, lapsed, stopped, or never)."""
    select = sa.select(approvals).where(approvals.c.approval_id == approval_id)
    async with store.transaction() as conn:
        row = (await conn.execute(select)).first()
    return None if row is None else _approval(row, now)


async def session_owner(store: SessionStore, session_id: str) -> SessionOwner | None:
    """The principal and tenant a session was started under; ``None``: no such session."""
    select = sa.select(states.c.principal, states.c.tenant).where(states.c.session_id == session_id)
    async with store.transaction() as conn:
        row = (await conn.execute(select)).first()
    return None if row is None else SessionOwner(row.principal, row.tenant)
