"""What a caller may reach, from the authenticate hook's answer: its sessions, its tenant.

The hook answers ``{"ok": True, "principal": P, "tenant": T, "approver": A}`` (each optional):

- A NEW session records ``P`` and ``T`` as its owner (``request_owner``); its sub-agents
  inherit them.
- A hook that names a tenant confines the caller to that tenant: any request on an existing
  session of another tenant (or of none) is refused with 403 before its handler runs
  (``enforce_tenant``), whatever the operation. A hook that names none decides alone, as it
  always did.
- The approval inbox (operation ``approvals``) lists the approvals of the caller's own sessions
  (principal ``P``, within tenant ``T`` when named); with ``"approver": True``, every approval
  of tenant ``T`` (of every tenant without one). A bare ``True`` sets no scope: the hook
  accepted the caller for every approval (``inbox_scope``).

Principals and tenants are compared as the text a session records (``core.owner.owner_text``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from starlette.requests import Request

from ..core.owner import SessionOwner, owner_text
from ..errors import AuthError
from ..runtime import AgentRuntime
from ..store.approvals import session_owner
from .auth import request_is_approver, request_principal, request_tenant
from .schemas import IDENTIFIER_MAX_LENGTH, IDENTIFIER_PATTERN

__all__ = [
    "OTHER_TENANT_MESSAGE",
    "CallerScope",
    "InboxScope",
    "enforce_tenant",
    "inbox_scope",
    "request_owner",
    "request_scope",
]

#: The refusal of a session in another tenant: the same whatever the operation.
OTHER_TENANT_MESSAGE = "This session belongs to another tenant"

_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)


def _is_identifier(value: str) -> bool:
    return len(value) <= IDENTIFIER_MAX_LENGTH and _IDENTIFIER.fullmatch(value) is not None


@dataclass(frozen=True)
class CallerScope:
    """Who the hook accepted: principal and tenant as text, and whether as an approver."""

    principal: str | None
    tenant: str | None
    approver: bool


def request_scope(request: Request) -> CallerScope:
    """The scope of an authenticated request (unset fields: the hook named none)."""
    return CallerScope(
        owner_text(request_principal(request)),
        owner_text(request_tenant(request)),
        request_is_approver(request),
    )


def request_owner(request: Request) -> SessionOwner:
    """The owner a session started by this request records."""
    scope = request_scope(request)
    return SessionOwner(scope.principal, scope.tenant)


async def enforce_tenant(runtime: AgentRuntime, request: Request, session_id: str | None) -> None:
    """Refuse a request on a session outside the tenant the hook named (nothing to check when
    it named none, the request names no session, or the session does not exist yet).

    Raises:
        AuthError: 403, the session belongs to another tenant (or to none).
    """
    tenant = request_scope(request).tenant
    if tenant is None or session_id is None or not _is_identifier(session_id):
        return  # nothing to check (an id that is not one: the validation refuses it next)
    owner = await session_owner(runtime.store, session_id)
    if owner is not None and owner.tenant != tenant:
        raise AuthError(OTHER_TENANT_MESSAGE, status=403)


@dataclass(frozen=True)
class InboxScope:
    """The owner filters the caller's scope adds to its inbox query; ``empty``: the filters
    it asked for fall outside its scope, so nothing matches."""

    principal: str | None
    tenant: str | None
    empty: bool = False


def inbox_scope(request: Request, principal: str | None, tenant: str | None) -> InboxScope:
    """The inbox filters of a caller who asked for ``principal`` and ``tenant`` (or not)."""
    scope = request_scope(request)
    own_principal = None if scope.approver else scope.principal
    empty = (own_principal is not None and principal not in (None, own_principal)) or (
        scope.tenant is not None and tenant not in (None, scope.tenant)
    )
    return InboxScope(own_principal or principal, scope.tenant or tenant, empty)
