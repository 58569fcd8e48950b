"""The request pipeline every route shares (the agent routes and the AI SDK chat).

One place for each step a request goes through:

1. the body: the size guard (Content-Length against ``runtime.max_result_bytes`` x 4, before
   reading) and the media type; read (counting bytes) and parse the JSON (bounded depth);
2. the authenticate hook (it can see the session the body or the query names), and the
   tenant it names: a session of another tenant is refused (``scope.py``);
3. validation against the route's model (a fixed message; details only when verbose);
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
from dataclasses import fields
from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request

from ..core.session import SubmitAnswer
from ..errors import InvalidResultError, RequestValidationError
from ..observability.log import set_service_name
from ..runtime import AgentRuntime, Submission, TurnHandle, precheck
from .auth import AuthHook, refuse_unless_authenticated, run_authenticate, set_request_context
from .body import REQUEST_BODY_CAP_FACTOR, REQUEST_INVALID_MESSAGE, M, parse_json, read_body
from .body import validate_body as _validate
from .limits import SlidingWindowLimiter
from .schemas import IDENTIFIER_MAX_LENGTH, IDENTIFIER_PATTERN, Identifier
from .scope import enforce_tenant, request_owner

__all__ = [
    "ChatIdPath",
    "RouteContext",
    "SessionIdQuery",
    "configure_router",
    "describe_issues",
    "identifier",
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
        model: type[M],
        operation: str,
        *,
        message: str = REQUEST_INVALID_MESSAGE,
        session_key: str = "sessionId",
        path_session_id: str | None = None,
    ) -> M:
        """Guard, read and parse the body, authenticate ``operation``, then validate it.

        The hook sees ``path_session_id`` as the request's session, else the body's
        ``session_key`` field when it is a string.
        """
        # The guard is read from the runtime on every request: one limit, configured once.
        cap = self.runtime.max_result_bytes * REQUEST_BODY_CAP_FACTOR
        raw = await read_body(request, cap, message=message, route=operation)
        parsed: Any = None
        parse_error: str | None = None
        try:
            parsed = parse_json(raw)
        except ValueError as exc:
            parse_error = str(exc)
        session_id = path_session_id
        if session_id is None and isinstance(parsed, dict):
            named = parsed.get(session_key)
            session_id = named if isinstance(named, str) else None
        set_request_context(request, session_id, parsed)
        await run_authenticate(self.authenticate, request, operation)
        await enforce_tenant(self.runtime, request, session_id)
        if parse_error is not None:
            details: dict[str, Any] = {"cause": "json"}
            if self.verbose:
                details["details"] = parse_error
            invalid = RequestValidationError(message, **details)
            invalid.add_note(parse_error)  # the server's log says why (server.bad_request)
            raise invalid
        return _validate(model, parsed, message=message, verbose=self.verbose)

    async def query(self, request: Request, operation: str, session_id: str) -> None:
        """Authenticate a request without a body (the session is in the query or path)."""
        set_request_context(request, session_id, None)
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
        with self._submit_errors(message):
            if len(answers) > 1:
                for sub in answers:
                    await precheck(self.runtime.ctx, sub)
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
