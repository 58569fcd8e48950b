"""The request pipeline every route shares (the agent routes and the AI SDK chat).

One place for each step a request goes through:

1. the body: the size guard (Content-Length against ``runtime.max_result_bytes`` x 4, before
   reading) and the media type; read (counting bytes) and parse the JSON (bounded depth);
2. validation against the route's model, one spelling per field and no undocumented name (a
   fixed message; details only when verbose);
3. authorization of the session the VALIDATED body acts on (its model's ``session_field``, or
   the path's id): the authenticate hook sees that session, and a session of the tenant the
   hook did not name is refused (``scope.py``). The handler acts on ``Authorized.session_id``,
   the value that was checked; an invalid body is refused only after every session it could
   be read as naming passed the same checks, so a refusal on a session is 401/403 however
   the body spells it;
4. for submits: the per-session rate limit (one window per session, whichever route the
   answers come through), a pre-check of every answer of the request before any is stored,
   then the runtime's submit, with its refusals mapped to the wire's typed answers.

Every refusal is ``{error, code, retryable, ...}`` with the error's status (see ``errors.py``).
A router is built through ``configure_router`` (fail closed without a hook, the service's
name on the log), and a route that starts a turn starts it as its caller (``RouteContext.start``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Annotated, Any, ClassVar, Generic, Protocol, TypeVar

from fastapi import Path, Query
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import Request

from ..core.session import SubmitAnswer
from ..errors import InvalidResultError, RequestValidationError
from ..observability.log import set_service_name
from ..runtime import AgentRuntime, Submission, TurnHandle
from .auth import (
    AuthHook,
    refuse_unless_authenticated,
    request_decider,
    run_authenticate,
    set_request_context,
)
from .body import REQUEST_BODY_CAP_FACTOR, REQUEST_INVALID_MESSAGE, parse_json, read_body
from .body import validate_body as _validate
from .limits import SlidingWindowLimiter
from .schemas import IDENTIFIER_MAX_LENGTH, IDENTIFIER_PATTERN, Identifier
from .scope import enforce_tenant, request_owner

__all__ = [
    "Authorized",
    "ChatIdPath",
    "RouteContext",
    "SessionIdQuery",
    "SessionRequest",
    "configure_router",
    "describe_issues",
    "identifier",
    "named_sessions",
    "session_field",
]

#: A ``sessionId`` query parameter: the identifier rule of every id on the wire.
SessionIdQuery = Annotated[
    str,
    Query(
        alias="sessionId",
        min_length=1,
        max_length=IDENTIFIER_MAX_LENGTH,
        pattern=IDENTIFIER_PATTERN,
    ),
]
#: A chat id in the path, under the same rule.
ChatIdPath = Annotated[
    str, Path(min_length=1, max_length=IDENTIFIER_MAX_LENGTH, pattern=IDENTIFIER_PATTERN)
]

_IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)


def identifier(value: str, message: str, cause: str) -> str:
    """``value`` if it is a valid id, else the fixed 400 with ``cause``.

    Raises:
        RequestValidationError: not a valid id.
    """
    try:
        return _IDENTIFIER.validate_python(value)
    except ValidationError:
        raise RequestValidationError(message, cause=cause) from None


def describe_issues(exc: InvalidResultError) -> str:
    """The verbose message of an invalid result: where and why it failed the schema."""
    parts = []
    for issue in exc.issues:
        if isinstance(issue, dict):
            loc = ".".join(str(p) for p in issue.get("loc", ())) or "result"
            parts.append(f"{loc}: {issue.get('msg', 'invalid')}")
    summary = "; ".join(parts) or "invalid"
    return (
        f"The result does not match the output schema of {exc.details.get('toolName')}: {summary}"
    )


def configure_router(
    runtime: AgentRuntime,
    authenticate: AuthHook | None,
    allow_unauthenticated: bool,
    service_name: str | None,
    what: str,
    things: str,
) -> None:
    """What every router does as it is built: refuse to serve without an ``authenticate``
    hook unless the caller opted out (``auth.refuse_unless_authenticated``: ``what`` names the
    router, ``things`` what an unauthenticated caller could start; the deployment is named by
    ``service_name``, else the runtime's), then tag every log event with ``service_name``.

    Raises:
        ConfigError: neither ``authenticate`` nor ``allow_unauthenticated=True``.
    """
    refuse_unless_authenticated(
        authenticate, allow_unauthenticated, service_name or runtime.service_name, what, things
    )
    if service_name:
        set_service_name(service_name)


class SessionRequest(Protocol):
    """A request body that names the session it acts on in one field (``None`` in it: the
    request creates a session, as ``/start`` without a ``sessionId``)."""

    session_field: ClassVar[str]


B = TypeVar("B", bound=BaseModel)


@dataclass(frozen=True)
class Authorized(Generic[B]):
    """A validated body and the session it was authorized for: the one a handler acts on."""

    body: B
    session_id: str | None

    @property
    def session(self) -> str:
        """The session, for a route whose body must name one (its model requires the field).

        Raises:
            RequestValidationError: the request names none (a new session's ``/start``).
        """
        if self.session_id is None:
            raise RequestValidationError(REQUEST_INVALID_MESSAGE, cause="session")
        return self.session_id


def session_field(model: type[BaseModel]) -> str:
    """The field of ``model`` that names the session a request acts on.

    Raises:
        TypeError: ``model`` declares none (a route's body model must: ``SessionRequest``).
    """
    field = getattr(model, "session_field", None)
    if not isinstance(field, str) or field not in model.model_fields:
        raise TypeError(f"{model.__name__} names no session_field")
    return field


def _spelling(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def named_sessions(model: type[BaseModel], parsed: Any) -> list[str]:
    """The sessions an invalid body could be read as naming: the string under any key that
    spells ``model``'s session field another way (``thread_id``, ``ThreadID``, ...)."""
    if not isinstance(parsed, dict):
        return []
    field = session_field(model)
    info = model.model_fields[field]
    spellings = {_spelling(field), _spelling(info.alias or field)}
    return [v for k, v in parsed.items() if _spelling(k) in spellings and isinstance(v, str)]


class RouteContext:
    """What every handler shares: the runtime, the hook, the options and the rate limit."""

    def __init__(
        self,
        runtime: AgentRuntime,
        authenticate: AuthHook | None,
        verbose: bool,
        limiter: SlidingWindowLimiter | None,
    ) -> None:
        self.runtime = runtime
        self.authenticate = authenticate
        self.verbose = verbose
        self.limiter = limiter

    async def body(
        self,
        request: Request,
        model: type[B],
        operation: str,
        *,
        message: str = REQUEST_INVALID_MESSAGE,
        path_session_id: str | None = None,
    ) -> Authorized[B]:
        """Guard, read, parse and validate the body, then authorize ``operation`` on the
        session the validated body acts on: its ``session_field``, or ``path_session_id`` for a
        route that names the session in its path (a body that names another one is a 400).

        The hook, the session-token binding and the tenant wall all see that one session, and
        the handler acts on ``Authorized.session_id``: what was checked is what is acted on.
        An invalid body is refused 400 once every session it could be read as naming (any
        spelling of the session field, or the path's id) passed the same checks, so a caller
        refused on a session is refused 401/403 however it spelt it.

        Raises:
            AuthError: the hook refused, or the session is another tenant's (403).
            RequestValidationError: the body is not JSON, not valid for ``model``, or names
                another session than the path.
        """
        if path_session_id is not None:
            path_session_id = identifier(path_session_id, message, "path")
        # The guard is read from the runtime on every request: one limit, configured once.
        cap = self.runtime.max_result_bytes * REQUEST_BODY_CAP_FACTOR
        raw = await read_body(request, cap, message=message, route=operation)
        try:
            parsed = parse_json(raw)
        except ValueError as exc:
            await self._authorize(request, operation, path_session_id, None)
            details: dict[str, Any] = {"cause": "json"}
            if self.verbose:
                details["details"] = str(exc)
            invalid = RequestValidationError(message, **details)
            invalid.add_note(str(exc))  # the server's log says why (server.bad_request)
            raise invalid from None
        try:
            checked = _validate(model, parsed, message=message, verbose=self.verbose)
        except RequestValidationError:
            named: list[str | None] = [path_session_id] if path_session_id else []
            for session_id in named or [*named_sessions(model, parsed)] or [None]:
                await self._authorize(request, operation, session_id, parsed)
            raise
        declared = getattr(checked, session_field(model))
        session_id = declared if path_session_id is None else path_session_id
        await self._authorize(request, operation, session_id, parsed)
        if declared is not None and declared != session_id:
            raise RequestValidationError(message, cause="session_mismatch")
        return Authorized(checked, session_id)

    async def query(self, request: Request, operation: str, session_id: str | None) -> None:
        """Authorize a request without a body: the session is its validated query or path
        parameter (``None``: it names none, as the unfiltered inbox)."""
        await self._authorize(request, operation, session_id, None)

    async def _authorize(
        self, request: Request, operation: str, session_id: str | None, body: Any
    ) -> None:
        """The hook, then the tenant wall, both on ``session_id``."""
        set_request_context(request, session_id, body)
        await run_authenticate(self.authenticate, request, operation)
        await enforce_tenant(self.runtime, request, session_id)

    async def start(
        self, request: Request, agent_type: str, message: str, session_id: str | None
    ) -> TurnHandle:
        """Start a turn for the request's caller: a session it creates records the principal
        and tenant the hook named (``scope.request_owner``)."""
        owner = request_owner(request)
        return await self.runtime.start(
            agent_type, message, session_id, principal=owner.principal, tenant=owner.tenant
        )

    async def submit(self, answers: Sequence[Submission], *, message: str) -> list[SubmitAnswer]:
        """Store the answers of one request, in order, all on one session.

        The rate limit counts every answer first (a refusal counts and stores nothing); when
        there are several, each is pre-checked before any is stored, so one refused answer
        refuses the whole request.

        Raises:
            RateLimitedError, PayloadTooLargeError, InvalidResultError, ApprovalMismatchError,
            RunSupersededError, RequestValidationError: the typed refusals.
        """
        if not answers:
            return []
        if self.limiter is not None:
            # After authentication: a flood without a valid credential cannot use up the
            # budget of someone else's session.
            self.limiter.hit(answers[0].session_id, len(answers))
        out: list[SubmitAnswer] = []
        # The decider is the credential's, never the body's (``auth.request_decider``).
        decider = request_decider()
        answers = [replace(sub, decider=decider) for sub in answers]
        with self._submit_errors(message):
            if len(answers) > 1:
                for sub in answers:
                    await self.runtime.precheck_submit(sub)
            for sub in answers:
                extra = {f.name: getattr(sub, f.name) for f in fields(sub)}
                del extra["session_id"], extra["tool_call_id"]
                out.append(
                    await self.runtime.submit_tool_result(sub.session_id, sub.tool_call_id, **extra)
                )
        return out

    @contextmanager
    def _submit_errors(self, message: str) -> Iterator[None]:
        """Map the runtime's submit refusals to the wire's answers."""
        try:
            yield
        except InvalidResultError as exc:
            if not self.verbose:
                raise
            raise InvalidResultError(
                exc.details["toolName"],
                exc.details["toolCallId"],
                exc.issues,
                message=describe_issues(exc),
                show_issues=True,
            ) from None
        except RequestValidationError as exc:
            # The runtime's own refusals say which rule failed; the contract's message is fixed.
            extra: dict[str, Any] = {"cause": "submit"}
            if self.verbose:
                extra["details"] = exc.message
            refused = RequestValidationError(message, **extra)
            refused.add_note(exc.message)  # the server's log says which rule failed
            raise refused from None
