"""``create_router``: the agent server's routes over one ``AgentRuntime``.

Each handler guards and parses its request, authenticates it, calls one runtime method and
answers a typed body; there is no business logic here. The order on a body route:

1. the size guard (Content-Length against ``runtime.max_result_bytes`` x 4, before reading)
   and the media type; 2. read (counting bytes) and parse the JSON (bounded depth);
3. the authenticate hook (it can see the session the body names); 4. validate against the
   route's model; 5. the submit rate limit (submits only); 6. the runtime call.

Every refusal is ``{error, code, retryable, ...}`` with the error's status (see ``errors.py``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..errors import (
    VALIDATION_ERROR_MESSAGE,
    InvalidResultError,
    RequestValidationError,
)
from ..runtime.runtime import AgentRuntime
from ..runtime.submit import MISSING
from .auth import (
    AuthHook,
    TokenIssuer,
    refuse_unless_authenticated,
    run_authenticate,
    set_request_context,
)
from .body import (
    REQUEST_BODY_CAP_FACTOR,
    REQUEST_INVALID_MESSAGE,
    M,
    parse_json,
    read_body,
    validate_body,
)
from .errors import HelixRoute
from .limits import SlidingWindowLimiter, limiter_for
from .schemas import (
    ChatSubmitToolResultRequest,
    ControlRequest,
    ControlResponse,
    ErrorBody,
    Identifier,
    ResumeRequest,
    StartRequest,
    StartResponse,
    StatusResponse,
    SubmitAnswerBody,
    SubmitToolResultRequest,
    TurnResponse,
    UnknownToolCallBody,
)
from .sse import event_stream

__all__ = ["create_router"]

#: Largest sequence a client may name (beyond it a number is not exact in JavaScript anyway).
MAX_SEQUENCE = 2**53

_IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)
_SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    # Proxies such as nginx buffer responses by default, which would hold events back.
    "X-Accel-Buffering": "no",
}


def error_response_doc(description: str, model: type[BaseModel] = ErrorBody) -> dict[str, Any]:
    return {"model": model, "description": description}


AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: error_response_doc(
        "`unauthorized`: the authenticate hook refused (missing/invalid/expired token)."
    ),
    403: error_response_doc("`forbidden`: authenticated, but not for this session."),
    500: error_response_doc(
        "`framework_internal_error`: an unexpected failure (nothing about it is revealed)."
    ),
}
BODY_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    400: error_response_doc(
        "`validation_error`: not JSON, nested too deeply, or not a valid body "
        "(fixed message; `details` only with verbose validation errors)."
    ),
    411: error_response_doc(
        "`validation_error` with `cause: length_required`: Transfer-Encoding without "
        "Content-Length."
    ),
    413: error_response_doc(
        "`validation_payload_too_large` with `cause: request_body`: the body is over "
        "the request-body guard (`limitBytes`, `sizeBytes`)."
    ),
    415: error_response_doc(
        "`validation_error` with `cause: content_type`: the body is not `application/json`."
    ),
}
_QUERY_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    400: error_response_doc("`validation_error`: a missing or invalid query parameter or header."),
    404: error_response_doc("`state_not_found`: no such session."),
}


def raw_json_body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a body the handler parses itself from raw bytes."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema(by_alias=True)}},
        }
    }


class RouteContext:
    """What every handler shares: the runtime, the hook and the options."""

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
        path_session_id: str | None = None,
    ) -> M:
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
            named = parsed.get("sessionId")
            session_id = named if isinstance(named, str) else None
        set_request_context(request, session_id, parsed)
        await run_authenticate(self.authenticate, request, operation)
        if parse_error is not None:
            details: dict[str, Any] = {"cause": "json"}
            if self.verbose:
                details["details"] = parse_error
            raise RequestValidationError(message, **details)
        return validate_body(model, parsed, message=message, verbose=self.verbose)

    async def query(self, request: Request, operation: str, session_id: str) -> None:
        set_request_context(request, session_id, None)
        await run_authenticate(self.authenticate, request, operation)

    async def submit(self, request: Request, path_session_id: str | None) -> Response:
        body: SubmitToolResultRequest
        if path_session_id is None:
            body = await self.body(
                request,
                SubmitToolResultRequest,
                "submit-tool-result",
                message=VALIDATION_ERROR_MESSAGE,
            )
            session_id = body.session_id
        else:
            body = await self.body(
                request,
                ChatSubmitToolResultRequest,
                "submit-tool-result",
                message=VALIDATION_ERROR_MESSAGE,
                path_session_id=path_session_id,
            )
            try:
                session_id = _IDENTIFIER.validate_python(path_session_id)
            except ValidationError:
                raise RequestValidationError(VALIDATION_ERROR_MESSAGE, cause="path") from None
            if body.session_id is not None and body.session_id != session_id:
                raise RequestValidationError(VALIDATION_ERROR_MESSAGE, cause="session_mismatch")
        if self.limiter is not None:
            # After authentication: a flood without a valid credential cannot use up the
            # budget of someone else's session. Refused submits store nothing.
            self.limiter.hit(session_id)
        try:
            answer = await self.runtime.submit_tool_result(
                session_id,
                body.tool_call_id,
                result=body.result if body.has_result else MISSING,
                error=body.error,
                kind=body.kind,
                approval_id=body.approval_id,
                approved=body.approved,
                reason=body.reason,
                edited_input=body.edited_input,
                shown_input=body.input,
            )
        except InvalidResultError as exc:
            if self.verbose:
                exc.message = describe_issues(exc)
                exc.details["issues"] = exc.issues
            raise
        except RequestValidationError as exc:
            # The runtime's own refusals say which rule failed; the contract's message is fixed.
            extra: dict[str, Any] = {"cause": "submit"}
            if self.verbose:
                extra["details"] = exc.message
            raise RequestValidationError(VALIDATION_ERROR_MESSAGE, **extra) from None
        out = answer.dump()
        if answer.status == "unknown_tool_call":
            out.update(
                error="No pending tool call matches this submit",
                code="unknown_tool_call",
                retryable=False,
            )
            return JSONResponse(out, status_code=404)
        return JSONResponse(out)


def describe_issues(exc: InvalidResultError) -> str:
    parts = []
    for issue in exc.issues:
        if isinstance(issue, dict):
            loc = ".".join(str(p) for p in issue.get("loc", ())) or "result"
            parts.append(f"{loc}: {issue.get('msg', 'invalid')}")
    summary = "; ".join(parts) or "invalid"
    return (
        f"The result does not match the output schema of {exc.details.get('toolName')}: {summary}"
    )


def _after(last_event_id: str | None, from_sequence: int | None) -> int:
    """The sequence a stream starts after: ``Last-Event-ID`` (the last event the client has)
    wins over ``fromSequence`` (the first event it wants)."""
    if last_event_id is not None:
        text = last_event_id.strip()
        # isascii: str.isdigit() also accepts digits int() refuses (superscripts).
        if not (text.isascii() and text.isdigit()) or len(text) > 16 or int(text) > MAX_SEQUENCE:
            raise RequestValidationError(REQUEST_INVALID_MESSAGE, cause="last_event_id")
        return int(text)
    if from_sequence is not None:
        return max(0, from_sequence - 1)
    return 0


def create_router(
    runtime: AgentRuntime,
    *,
    authenticate: AuthHook | None = None,
    allow_unauthenticated: bool = False,
    service_name: str | None = None,
    verbose_validation_errors: bool = False,
    rate_limit_per_minute: int | None = None,
    token_issuer: TokenIssuer | None = None,
) -> APIRouter:
    """The agent server's routes over ``runtime``; include it in any FastAPI app.

    Args:
        runtime: the runtime to serve (launch it in the app's lifespan: ``lifespan_for``).
        authenticate: ``authenticate(request, operation)``, run before every handler (see
            ``helix_dbos.http.auth``; ``session_token_auth`` builds one).
        allow_unauthenticated: serve without a hook. Anyone who can reach the routes can then
            inject data into an agent's reasoning: only behind a proxy that authenticates.
        service_name: names this deployment in the unauthenticated-mode warning.
        verbose_validation_errors: add the validation details to the 400 answers (they reveal
            the schemas: for development).
        rate_limit_per_minute: submits per minute per session; ``True`` for the default
            (``DEFAULT_SUBMIT_RATE_LIMIT``, 60); ``None`` disables the limit.
        token_issuer: ``issue(session_id) -> token``; ``/start`` answers its ``token``.

    Raises:
        ConfigError: neither ``authenticate`` nor ``allow_unauthenticated=True``.
    """
    refuse_unless_authenticated(
        authenticate,
        allow_unauthenticated,
        service_name or runtime.service_name,
        "agent server",
        "sessions",
    )
    limiter = limiter_for(rate_limit_per_minute)
    api = RouteContext(runtime, authenticate, verbose_validation_errors, limiter)
    router = APIRouter(route_class=HelixRoute)

    @router.post(
        "/start",
        summary="Start a turn",
        description="Start a new session (or the next turn of an ended session).",
        response_model=StartResponse,
        responses={
            **BODY_RESPONSES,
            404: error_response_doc("`framework_agent_not_found`: no such agent type."),
            409: error_response_doc(
                "`state_already_running` (retryable): the session has a turn running or parked."
            ),
        },
        openapi_extra=raw_json_body_doc(StartRequest),
    )
    async def start(request: Request) -> Response:
        body = await api.body(request, StartRequest, "start")
        handle = await runtime.start(body.agent_type, body.message, body.session_id)
        out = handle.dump()
        if token_issuer is not None:
            out["token"] = token_issuer(handle.session_id)
        return JSONResponse(out)

    @router.post(
        "/resume",
        summary="Resume a session",
        description="`continue` a complete batch, or deliver a new message (`with_message`).",
        response_model=TurnResponse,
        responses={
            **BODY_RESPONSES,
            404: error_response_doc("`state_not_found`: no such session."),
            409: error_response_doc(
                "`state_not_resumable` (retryable while a batch is partial) or "
                "`state_already_running`."
            ),
        },
        openapi_extra=raw_json_body_doc(ResumeRequest),
    )
    async def resume(request: Request) -> Response:
        body = await api.body(request, ResumeRequest, "resume")
        handle = await runtime.resume(
            body.session_id, body.mode, body.message, body.abandon_pending
        )
        return JSONResponse(handle.dump())

    @router.get(
        "/sse",
        summary="Stream a session's events (Server-Sent Events)",
        description="Frames are `id: <sequence>` + `data: <event JSON>`. Resume with "
        "`Last-Event-ID` (the last sequence received) or `fromSequence` (the "
        "first sequence wanted). The stream ends when the turn ends or parks.",
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "An event stream.",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            **_QUERY_RESPONSES,
        },
    )
    async def sse(
        request: Request,
        session_id: Annotated[
            str,
            Query(alias="sessionId", min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$"),
        ],
        from_sequence: Annotated[
            int | None, Query(alias="fromSequence", ge=0, le=MAX_SEQUENCE)
        ] = None,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    ) -> Response:
        await api.query(request, "sse", session_id)
        after = _after(last_event_id, from_sequence)
        await runtime.session(session_id)  # 404 before the stream starts
        return StreamingResponse(
            event_stream(runtime, session_id, after, resend_pending=after > 0),
            media_type="text/event-stream",
            headers=_SSE_HEADERS,
        )

    @router.get(
        "/status",
        summary="A session's status and pending calls",
        response_model=StatusResponse,
        responses=_QUERY_RESPONSES,
    )
    async def status(
        request: Request,
        session_id: Annotated[
            str,
            Query(alias="sessionId", min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$"),
        ],
    ) -> Response:
        await api.query(request, "status", session_id)
        return JSONResponse(await runtime.status(session_id))

    control_responses: dict[int | str, dict[str, Any]] = {
        **BODY_RESPONSES,
        404: error_response_doc("`state_not_found`: no such session."),
    }

    @router.post(
        "/interrupt",
        summary="Interrupt a session's turn (and its sub-agents)",
        response_model=ControlResponse,
        responses=control_responses,
        openapi_extra=raw_json_body_doc(ControlRequest),
    )
    async def interrupt(request: Request) -> Response:
        body = await api.body(request, ControlRequest, "interrupt")
        state = await runtime.interrupt(body.session_id)
        return JSONResponse(
            {"sessionId": state.session_id, "status": state.status, "runId": state.run_id}
        )

    @router.post(
        "/abort",
        summary="Abort a session's turn: it ends failed with framework_cancelled",
        response_model=ControlResponse,
        responses=control_responses,
        openapi_extra=raw_json_body_doc(ControlRequest),
    )
    async def abort(request: Request) -> Response:
        body = await api.body(request, ControlRequest, "abort")
        state = await runtime.abort(body.session_id, body.reason)
        return JSONResponse(
            {"sessionId": state.session_id, "status": state.status, "runId": state.run_id}
        )

    submit_responses: dict[int | str, dict[str, Any]] = {
        **BODY_RESPONSES,
        400: error_response_doc(
            "`validation_error` (fixed message: the body is not a valid submit), "
            "`INVALID_RESULT` (`toolName`, `toolCallId`: the result failed the tool's "
            "output schema) or `approval_mismatch`."
        ),
        404: error_response_doc(
            "`unknown_tool_call`: no pending call matches (`reason: run_stopped` after "
            "an interrupt or abort; `deadline_lapsed` after the deadline).",
            UnknownToolCallBody,
        ),
        409: error_response_doc(
            "`state_run_superseded`: the call's run was superseded; nothing written."
        ),
        413: error_response_doc(
            "`validation_payload_too_large`: `cause` is `tool_result` (the result is "
            "over the submit size limit) or `request_body` (the body is over the "
            "guard, 4x the limit); `limitBytes`, `sizeBytes`. Nothing stored."
        ),
        429: error_response_doc(
            "`rate_limited` (retryable, `Retry-After`): too many submits for the "
            "session; nothing stored."
        ),
    }

    @router.post(
        "/submit-tool-result",
        summary="Submit a client tool's result or an approval decision",
        response_model=SubmitAnswerBody,
        responses=submit_responses,
        openapi_extra=raw_json_body_doc(SubmitToolResultRequest),
    )
    async def submit_tool_result(request: Request) -> Response:
        return await api.submit(request, None)

    @router.post(
        "/chat/{chat_id}/submit-tool-result",
        summary="Submit a client tool's result or an approval decision (chat route)",
        description="The same as `/submit-tool-result` with the session as the path's id.",
        response_model=SubmitAnswerBody,
        responses=submit_responses,
        openapi_extra=raw_json_body_doc(ChatSubmitToolResultRequest),
    )
    async def chat_submit_tool_result(request: Request, chat_id: str) -> Response:
        return await api.submit(request, chat_id)

    return router
