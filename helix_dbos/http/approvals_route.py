"""``GET /approvals``: the approval inbox over HTTP.

The authenticate hook sees the operation ``approvals`` (with the ``sessionId`` filter, if any,
as the request's session) and its answer scopes the list (``scope.inbox_scope``): by default
a principal sees its own sessions' approvals, an approver of a tenant that tenant's. An
approver answers a listed approval through ``/submit-tool-result`` on its ``rootSessionId``
with its ``approvalId``, so every rule of a submit holds (digest binding, fencing,
``run_stopped``, tombstones).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..core.owner import OWNER_MAX_LENGTH
from ..store.approvals import (
    APPROVALS_PAGE_DEFAULT,
    APPROVALS_PAGE_MAX,
    CURSOR_PATTERN,
    PendingApproval,
)
from ..store.decisions import (
    DECISION_CURSOR_PATTERN,
    DECISIONS_PAGE_DEFAULT,
    DECISIONS_PAGE_MAX,
    DecisionQuery,
    list_decisions,
)
from .errors import HelixRoute
from .openapi import AUTH_RESPONSES, error_response_doc
from .pipeline import RouteContext
from .schemas import IDENTIFIER_MAX_LENGTH, IDENTIFIER_PATTERN
from .scope import inbox_scope, request_scope

__all__ = [
    "ApprovalsResponse",
    "DecisionView",
    "DecisionsResponse",
    "PendingApprovalView",
    "create_approvals_router",
]

#: The largest time a query may name (beyond it a number is not exact in JavaScript).
_MAX_MS = 2**53


class _View(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class PendingApprovalView(PendingApproval):
    """One approval waiting for a human."""

    # The store's ``PendingApproval`` (declared there once), named for the OpenAPI document.


class DecisionView(_View):
    """One decision on record: an answer to an approval, or an expiry's outcome."""

    id: int
    approval_id: str
    session_id: str
    root_session_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    args_digest: str | None
    """The digest of the call's arguments."""
    edited_digest: str | None
    """The digest of the arguments it was given for, when an edit changed them."""
    outcome: str
    """``approved``, ``edited``, ``denied`` or ``expired``."""
    final: bool
    """Whether it decided the call (a quorum's partial approval did not)."""
    votes: int | None
    quorum: int | None
    reason: str | None
    on_timeout: str | None
    principal: str | None
    """Who decided, as the authenticate hook or the token established it."""
    tenant: str | None
    credential: str
    """``hook``, ``session_token``, ``approver_token``, ``operator_cli``, ``in_process``,
    ``deadline`` (an expiry) or ``unauthenticated``."""
    roles: list[str] | None
    owner_principal: str | None
    """Who started the session."""
    owner_tenant: str | None
    decided_at: int
    """Epoch ms."""


class DecisionsResponse(_View):
    """``GET /approvals/decisions``: a page of the decision record, newest first."""

    decisions: list[DecisionView]
    next_cursor: str | None


class ApprovalsResponse(_View):
    """``GET /approvals``: a page of pending approvals, oldest first."""

    approvals: list[PendingApprovalView]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; ``null`` on the last page."""


_Name = Annotated[
    str | None,
    Query(min_length=1, max_length=IDENTIFIER_MAX_LENGTH, pattern=IDENTIFIER_PATTERN),
]
_Owner = Annotated[
    str | None, Query(min_length=1, max_length=OWNER_MAX_LENGTH, pattern=IDENTIFIER_PATTERN)
]

_ID: dict[str, Any] = {
    "min_length": 1,
    "max_length": IDENTIFIER_MAX_LENGTH,
    "pattern": IDENTIFIER_PATTERN,
    "description": "The root session.",
}

_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    400: error_response_doc("`validation_error`: an invalid query parameter."),
}


def create_approvals_router(api: RouteContext) -> APIRouter:
    """The inbox route over ``api``'s runtime and hook (included by ``create_router``)."""
    router = APIRouter(route_class=HelixRoute)
    runtime = api.runtime

    @router.get(
        "/approvals",
        summary="List pending approvals across sessions, oldest first",
        description="Filters combine (AND). The authenticate hook (operation `approvals`) "
        "scopes the list: by default a principal sees its own sessions' approvals, an "
        "approver of a tenant that tenant's. Answer one with `/submit-tool-result` on its "
        "`rootSessionId`.",
        response_model=ApprovalsResponse,
        responses=_RESPONSES,
    )
    async def list_approvals(
        request: Request,
        tool: _Name = None,
        session_id: Annotated[
            str | None,
            Query(
                alias="sessionId",
                min_length=1,
                max_length=IDENTIFIER_MAX_LENGTH,
                pattern=IDENTIFIER_PATTERN,
                description="The session that raised the call, or its root.",
            ),
        ] = None,
        principal: _Owner = None,
        tenant: _Owner = None,
        older_than_ms: Annotated[
            int | None,
            Query(alias="olderThanMs", ge=0, le=_MAX_MS, description="Waited at least this."),
        ] = None,
        deadline_before: Annotated[
            int | None,
            Query(
                alias="deadlineBefore",
                ge=0,
                le=_MAX_MS,
                description="Expires before this time (epoch ms).",
            ),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=APPROVALS_PAGE_MAX)] = APPROVALS_PAGE_DEFAULT,
        cursor: Annotated[
            str | None,
            Query(pattern=CURSOR_PATTERN, description="The previous page's `nextCursor`."),
        ] = None,
    ) -> Response:
        # A named session is authorized like on every route (its tenant's wall included).
        await api.query(request, "approvals", session_id)
        scope = inbox_scope(request, principal, tenant)
        if scope.empty:
            return JSONResponse({"approvals": [], "nextCursor": None})
        page = await runtime.approvals(
            viewer=request_scope(request).principal,  # four eyes: not offered to the owner
            tool=tool,
            session_id=session_id,
            principal=scope.principal,
            tenant=scope.tenant,
            older_than=None if older_than_ms is None else older_than_ms / 1000,
            deadline_before=deadline_before,
            limit=limit,
            cursor=cursor,
        )
        return JSONResponse(page.dump())

    _decisions_route(router, api)
    return router


def _decisions_route(router: APIRouter, api: RouteContext) -> None:
    """``GET /approvals/decisions``: the decision record over HTTP, scoped like the inbox."""
    runtime = api.runtime

    @router.get(
        "/approvals/decisions",
        summary="List the decision record: who answered which approval, newest first",
        description="Scoped like the inbox (operation `approvals`): by default a principal "
        "sees the decisions on its own sessions, an approver of a tenant that tenant's. "
        "`principal` and `tenant` filter the session's owner, `decidedBy` the decider.",
        response_model=DecisionsResponse,
        responses=_RESPONSES,
    )
    async def list_decided(
        request: Request,
        tool: _Name = None,
        session_id: Annotated[str | None, Query(alias="sessionId", **_ID)] = None,
        approval_id: Annotated[
            str | None, Query(alias="approvalId", min_length=1, max_length=1024)
        ] = None,
        principal: _Owner = None,
        tenant: _Owner = None,
        decided_by: Annotated[
            str | None,
            Query(alias="decidedBy", min_length=1, max_length=OWNER_MAX_LENGTH),
        ] = None,
        outcome: Annotated[str | None, Query(pattern="^(approved|edited|denied|expired)$")] = None,
        since: Annotated[int | None, Query(ge=0, le=_MAX_MS)] = None,
        until: Annotated[int | None, Query(ge=0, le=_MAX_MS)] = None,
        limit: Annotated[int, Query(ge=1, le=DECISIONS_PAGE_MAX)] = DECISIONS_PAGE_DEFAULT,
        cursor: Annotated[str | None, Query(pattern=DECISION_CURSOR_PATTERN)] = None,
    ) -> Response:
        await api.query(request, "approvals", session_id)
        scope = inbox_scope(request, principal, tenant)
        if scope.empty:
            return JSONResponse({"decisions": [], "nextCursor": None})
        query = DecisionQuery(
            tool=tool,
            session_id=session_id,
            approval_id=approval_id,
            principal=decided_by,
            owner_principal=scope.principal,
            owner_tenant=scope.tenant,
            outcome=outcome,
            since=since,
            until=until,
            limit=limit,
            cursor=cursor,
        )
        return JSONResponse((await list_decisions(runtime.store, query)).dump())
