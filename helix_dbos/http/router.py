"""``create_router``: the agent server's routes over one ``AgentRuntime``.

Each handler goes through the shared request pipeline (``pipeline.py``: guard, read and parse
the body, authenticate, validate, rate-limit submits), calls one runtime method and answers a
typed body; there is no business logic here. Every refusal is ``{error, code, retryable,
...}`` with the error's status (see ``errors.py``). The AG-UI endpoint (``agui.py``) is
included over the same runtime, hook and rate limit.
"""

from __future__ import annotations

import importlib.util
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..errors import VALIDATION_ERROR_MESSAGE, RequestValidationError
from ..observability.logging_config import install_query_secret_filter
from ..runtime import AgentRuntime
from .agui import create_agui_router
from .approvals_route import create_approvals_router
from .auth import AuthHook, TokenIssuer
from .body import REQUEST_INVALID_MESSAGE
from .errors import HelixRoute
from .frames import SSE_HEADERS
from .limits import SlidingWindowLimiter, limiter_for
from .openapi import (
    BODY_RESPONSES,
    CREATES_SESSION_DOC,
    IDENTIFIER_PATH_DOC,
    LAST_EVENT_ID_DOC,
    QUERY_RESPONSES,
    error_response_doc,
    event_stream_doc,
    raw_json_body_doc,
)
from .pipeline import RouteContext, SessionIdQuery, configure_router
from .schemas import (
    ChatSubmitToolResultRequest,
    CheckpointsResponse,
    ControlRequest,
    ControlResponse,
    ResumeRequest,
    RetryRequest,
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


async def _submit(api: RouteContext, request: Request, path_session_id: str | None) -> Response:
    """``/submit-tool-result`` and its chat-path twin: one answer, its typed outcome."""
    message = VALIDATION_ERROR_MESSAGE
    model = SubmitToolResultRequest if path_session_id is None else ChatSubmitToolResultRequest
    checked = await api.body(
        request, model, "submit-tool-result", message=message, path_session_id=path_session_id
    )
    (answer,) = await api.submit([checked.body.submission(checked.session)], message=message)
    out = answer.dump()
    if answer.status == "unknown_tool_call":
        out.update(
            error="No pending tool call matches this submit",
            code="unknown_tool_call",
            retryable=False,
        )
        return JSONResponse(out, status_code=404)
    return JSONResponse(out)


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


def _auth_mode(authenticate: AuthHook | None, token_issuer: TokenIssuer | None) -> str:
    """``session_tokens`` (the hook verifies tokens that ``/start`` issues), ``custom`` (the
    app's own hook) or ``unauthenticated``."""
    if authenticate is None:
        return "unauthenticated"
    return "session_tokens" if token_issuer is not None else "custom"


def create_router(
    runtime: AgentRuntime,
    *,
    authenticate: AuthHook | None = None,
    allow_unauthenticated: bool = False,
    service_name: str | None = None,
    verbose_validation_errors: bool = False,
    rate_limit_per_minute: int | SlidingWindowLimiter | None = None,
    token_issuer: TokenIssuer | None = None,
    mcp: bool = True,
) -> APIRouter:
    """The agent server's routes over ``runtime``; include it in any FastAPI app.

    Args:
        runtime: the runtime to serve (launch it in the app's lifespan: ``lifespan_for``).
        authenticate: ``authenticate(request, operation)``, run before every handler (see
            ``helix_dbos.http.auth``; ``session_token_auth`` builds one).
        allow_unauthenticated: serve without a hook. Anyone who can reach the routes can then
            inject data into an agent's reasoning: only behind a proxy that authenticates.
        service_name: tags every log event with ``service`` (one name per process) and
            names this deployment in the unauthenticated-mode warning.
        verbose_validation_errors: add the validation details to the 400 answers (they reveal
            the schemas: for development).
        rate_limit_per_minute: submits per minute per session; ``True`` for the default
            (``DEFAULT_SUBMIT_RATE_LIMIT``, 60); ``None`` disables the limit. Pass one
            ``SlidingWindowLimiter`` to this router and ``create_chat_router`` to give each
            session one window across both.
        token_issuer: ``issue(session_id) -> token``; ``/start`` answers its ``token``.
        mcp: serve ``POST /mcp`` (docs/mcp.md) when the ``mcp`` extra is installed; its
            transport runs in the router's lifespan, which the including app runs.

    Raises:
        ConfigError: neither ``authenticate`` nor ``allow_unauthenticated=True``.
    """
    configure_router(
        runtime, authenticate, allow_unauthenticated, service_name, "agent server", "sessions"
    )
    # The runtime's startup line says how this server authenticates.
    runtime.startup_fields["auth"] = _auth_mode(authenticate, token_issuer)
    # A browser's event stream sends its token as ?token=: keep it out of uvicorn's access
    # log, however the app configures logging.
    install_query_secret_filter()
    api = RouteContext(
        runtime, authenticate, verbose_validation_errors, limiter_for(rate_limit_per_minute)
    )
    router = APIRouter(route_class=HelixRoute)
    _add_turn_routes(router, api, token_issuer)
    _add_retry_routes(router, api)
    _add_read_routes(router, api)
    _add_control_routes(router, api)
    _add_submit_routes(router, api)
    # AG-UI 1.0 (POST /agui/{agentType}): the same runtime, hook and rate limit.
    router.include_router(create_agui_router(api))
    # The approval inbox (GET /approvals), behind the same hook.
    router.include_router(create_approvals_router(api))
    if mcp:
        _serve_mcp(router, runtime, authenticate, allow_unauthenticated, service_name, token_issuer)
    return router


def _serve_mcp(
    router: APIRouter,
    runtime: AgentRuntime,
    authenticate: AuthHook | None,
    allow_unauthenticated: bool,
    service_name: str | None,
    token_issuer: TokenIssuer | None,
) -> None:
    """``POST /mcp`` (docs/mcp.md) on ``router``, behind the same authentication, when the
    ``mcp`` extra is installed."""
    if importlib.util.find_spec("mcp") is None:
        return
    from .mcp_route import MCPEndpoint, mount_mcp

    endpoint = MCPEndpoint(
        runtime,
        authenticate=authenticate,
        allow_unauthenticated=allow_unauthenticated,
        service_name=service_name,
        token_issuer=token_issuer,
        checked=True,
    )
    mount_mcp(router, endpoint)


def _add_turn_routes(
    router: APIRouter, api: RouteContext, token_issuer: TokenIssuer | None
) -> None:
    """Register ``POST /start`` (a new session or turn; with ``token_issuer``, its token) and
    ``POST /resume`` on ``router``."""
    runtime = api.runtime

    @router.post(
        "/start",
        summary="Start a turn",
        description="Start a new session (or the next turn of an ended session).",
        response_model=StartResponse,
        responses={
            **BODY_RESPONSES,
            404: error_response_doc("`framework_agent_not_found`: no such agent type."),
            409: error_response_doc(
                "`state_already_running`: the session has a turn running (retryable) or "
                "parked (not retryable: `waitingFor` and `awaitedToolCallIds` name the calls "
                "to answer, interrupt or abandon first)."
            ),
        },
        openapi_extra={**raw_json_body_doc(StartRequest), **CREATES_SESSION_DOC},
    )
    async def start(request: Request) -> Response:
        checked = await api.body(request, StartRequest, "start")
        body = checked.body
        handle = await api.start(request, body.agent_type, body.message, checked.session_id)
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
        checked = await api.body(request, ResumeRequest, "resume")
        body, session_id = checked.body, checked.session
        handle = await runtime.resume(
            session_id, body.mode, body.message, body.abandon_pending, body.checkpoint_id
        )
        return JSONResponse(handle.dump())


def _add_retry_routes(router: APIRouter, api: RouteContext) -> None:
    """Register ``POST /retry`` and ``GET /checkpoints`` on ``router`` (docs/lifecycle.md)."""
    runtime = api.runtime

    @router.post(
        "/retry",
        summary="Retry a failed or interrupted turn",
        description="A new run re-runs the turn; see the lifecycle page for what it keeps, "
        "rewinds and when it needs a `message`.",
        response_model=TurnResponse,
        responses={
            **BODY_RESPONSES,
            400: error_response_doc(
                "`validation_error`: `cause: message` (the failed run committed steps, or "
                "nothing after the checkpoint is user input: give a message)."
            ),
            404: error_response_doc("`state_not_found`: no such session or checkpoint."),
            409: error_response_doc(
                "`state_already_running` (a turn is running or parked) or "
                "`state_not_resumable` (completed: nothing to retry)."
            ),
        },
        openapi_extra=raw_json_body_doc(RetryRequest),
    )
    async def retry(request: Request) -> Response:
        checked = await api.body(request, RetryRequest, "retry")
        body = checked.body
        handle = await runtime.retry(checked.session, body.message, body.checkpoint_id)
        return JSONResponse(handle.dump())

    @router.get(
        "/checkpoints",
        summary="A session's checkpoints, newest first",
        response_model=CheckpointsResponse,
        responses=QUERY_RESPONSES,
    )
    async def list_checkpoints(request: Request, session_id: SessionIdQuery) -> Response:
        await api.query(request, "checkpoints", session_id)
        found = await runtime.checkpoints(session_id)
        return JSONResponse({"sessionId": session_id, "checkpoints": found})


def _add_read_routes(router: APIRouter, api: RouteContext) -> None:
    """Register the reads of a session on ``router``: ``GET /sse`` (its event stream) and
    ``GET /status``."""
    runtime = api.runtime

    @router.get(
        "/sse",
        summary="Stream a session's events (Server-Sent Events)",
        description="Frames are `id: <sequence>` + `data: <event JSON>`. Resume with "
        "`Last-Event-ID` (the last sequence received) or `fromSequence` (the "
        "first sequence wanted). The stream ends when the turn ends or parks.",
        response_class=StreamingResponse,
        responses={
            200: event_stream_doc("An event stream.", "One session event (JSON)."),
            **QUERY_RESPONSES,
        },
    )
    async def sse(
        request: Request,
        session_id: SessionIdQuery,
        from_sequence: Annotated[
            int | None, Query(alias="fromSequence", ge=0, le=MAX_SEQUENCE)
        ] = None,
        last_event_id: Annotated[
            str | None, Header(alias="Last-Event-ID"), LAST_EVENT_ID_DOC
        ] = None,
    ) -> Response:
        await api.query(request, "sse", session_id)
        after = _after(last_event_id, from_sequence)
        # 404 before the stream starts; the stream's first read reuses the view.
        view = await runtime.status(session_id)
        return StreamingResponse(
            event_stream(runtime, session_id, after, resend_pending=after > 0, view=view),
            media_type="text/event-stream",
            headers=SSE_HEADERS,
        )

    @router.get(
        "/status",
        summary="A session's status and pending calls",
        response_model=StatusResponse,
        responses=QUERY_RESPONSES,
    )
    async def status(
        request: Request,
        session_id: SessionIdQuery,
    ) -> Response:
        await api.query(request, "status", session_id)
        return JSONResponse(await runtime.status(session_id))


def _add_control_routes(router: APIRouter, api: RouteContext) -> None:
    """Register ``POST /interrupt`` and ``POST /abort`` (stop a session's turn) on ``router``."""
    runtime = api.runtime
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
        checked = await api.body(request, ControlRequest, "interrupt")
        state = await runtime.interrupt(checked.session)
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
        checked = await api.body(request, ControlRequest, "abort")
        state = await runtime.abort(checked.session, checked.body.reason)
        return JSONResponse(
            {"sessionId": state.session_id, "status": state.status, "runId": state.run_id}
        )


def _add_submit_routes(router: APIRouter, api: RouteContext) -> None:
    """Register ``POST /submit-tool-result`` and its chat-path twin
    ``POST /chat/{chat_id}/submit-tool-result`` on ``router``."""
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
        return await _submit(api, request, None)

    @router.post(
        "/chat/{chat_id}/submit-tool-result",
        summary="Submit a client tool's result or an approval decision (chat route)",
        description="The same as `/submit-tool-result` with the session as the path's id.",
        response_model=SubmitAnswerBody,
        responses=submit_responses,
        openapi_extra=raw_json_body_doc(ChatSubmitToolResultRequest),
    )
    async def chat_submit_tool_result(
        request: Request, chat_id: Annotated[str, IDENTIFIER_PATH_DOC]
    ) -> Response:
        return await _submit(api, request, chat_id)
