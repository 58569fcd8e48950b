"""``create_chat_router``: a chat endpoint a Vercel AI SDK ``useChat`` client talks to directly.

``POST /chat`` takes the AI SDK's request body ``{id, messages, trigger, messageId?}`` (``id``
is the root session) and answers a UI message stream (see ``ui_stream.py``). The server is
the authority: the client's history is never replayed into the session. Only two things are
read from the request:

* when the last message is an assistant message, its tool parts in the states
  ``output-available`` / ``output-error`` / ``approval-responded`` for calls the session is
  waiting on: each is submitted (the same idempotent path as ``/submit-tool-result``), and
  the stream carries the continuation (or just starts and finishes when the batch still
  waits for other calls, or the answer was already stored);
* otherwise, the text of the last user message: it starts a turn (a new session, or the next
  turn of the session) and the stream carries its events.

``GET /chat/{id}/stream`` is the AI SDK's reconnect: 204 when the session has no active turn;
a parked turn replays its pending calls; a running turn streams from its current run's start.

``POST /chat/sessions`` answers a new chat id and, with session tokens, the token bound to it:
what a browser needs before a chat's first message.

Refusals happen before any stream (and before any answer of the request is stored) and are
the typed ``{error, code, retryable, ...}`` answers of the other routes (``INVALID_RESULT``,
``approval_mismatch``, ``state_already_running``, ...). The request goes through the shared
pipeline (``pipeline.py``). The authenticate hook sees the operations ``chat-new`` (no
session yet), ``chat`` and ``chat-stream`` with the chat's id as ``request_session_id``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any, ClassVar, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..errors import STORE_UNAVAILABLE_MESSAGE, RequestValidationError, SessionNotFoundError
from ..runtime import AgentRuntime, Submission
from .auth import AuthHook, TokenIssuer, run_authenticate
from .auth import set_request_context as _set_context
from .body import REQUEST_INVALID_MESSAGE
from .body_variants import chat_request_variants
from .errors import HelixRoute, end_on_outage
from .frames import KEEP_ALIVE
from .limits import SlidingWindowLimiter, limiter_for
from .openapi import (
    AUTH_RESPONSES,
    BODY_RESPONSES,
    CREATES_SESSION_DOC,
    error_response_doc,
    event_stream_doc,
    raw_json_body_doc,
)
from .pipeline import ChatIdPath, RouteContext, configure_router
from .schemas import Identifier
from .sse import (
    ENDED_STATUSES,
    POLL_SECONDS,
    follow_events,
    is_parked,
    unanswered_calls,
)
from .stream_points import last_sequence as _last_sequence
from .stream_points import run_start as _run_start
from .ui_stream import DONE, UI_MESSAGE_STREAM_HEADERS, UIMessageStream, encode_chunks

__all__ = ["ChatRequest", "ChatSessionResponse", "UIMessage", "create_chat_router"]

#: The tool-part states that answer a pending call.
ANSWER_STATES = frozenset({"output-available", "output-error", "approval-responded"})

#: The end of a stream the store left (mid-stream it cannot be a 503): an error, then done.
_OUTAGE_TAIL = encode_chunks([{"type": "error", "errorText": STORE_UNAVAILABLE_MESSAGE}]) + DONE


class UIMessage(BaseModel):
    """One AI SDK ``UIMessage``: ``id``, ``role``, ``metadata`` and ``parts``; the parts are
    read loosely (only tool parts and text, by their documented names)."""

    model_config = ConfigDict(extra="forbid")

    id: str = ""
    role: Literal["system", "user", "assistant"]
    metadata: Any = None
    """The application's own data; never read."""
    parts: list[dict[str, Any]] = Field(default_factory=list)


class ChatRequest(BaseModel):
    """The AI SDK chat transport's body (``DefaultChatTransport``): ``id``, ``messages``,
    ``trigger``, ``messageId``. Any other name is refused: one spelling per field."""

    # The document describes the messages the server acts on (see body_variants.py).
    model_config = ConfigDict(extra="forbid", json_schema_extra=chat_request_variants)

    session_field: ClassVar[str] = "id"

    id: Identifier
    """The chat's id: the ROOT session."""
    messages: list[UIMessage] = Field(min_length=1)
    trigger: str | None = None
    message_id: str | None = Field(default=None, alias="messageId")


class ChatSessionResponse(BaseModel):
    """``POST /chat/sessions``: a new chat id and the token bound to it."""

    id: str
    """The chat's id: send it as the AI SDK chat's ``id``."""
    token: str | None = None
    """A short-lived token bound to ``id`` (``Authorization: Bearer``); present when session
    tokens are enabled."""


def _invalid(cause: str) -> RequestValidationError:
    return RequestValidationError(REQUEST_INVALID_MESSAGE, cause=cause)


def _is_tool_part(part: dict[str, Any]) -> bool:
    kind = part.get("type")
    return isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool")


def answers_in(
    session_id: str, message: UIMessage, pending: dict[str, dict[str, Any]]
) -> list[Submission]:
    """The answers an assistant message carries for the ``pending`` calls (by tool-call id),
    as submits on ``session_id``.

    Parts for other calls (earlier steps' history, server tools) are ignored.

    Raises:
        RequestValidationError: a part answering a pending call has the wrong shape.
    """
    out: list[Submission] = []
    for part in message.parts:
        if not _is_tool_part(part) or part.get("state") not in ANSWER_STATES:
            continue
        tool_call_id = part.get("toolCallId")
        call = pending.get(tool_call_id) if isinstance(tool_call_id, str) else None
        if call is None or tool_call_id is None:
            continue
        if call.get("kind") == "approval":
            out.append(_approval_answer(session_id, tool_call_id, part))
        else:
            out.append(_result_answer(session_id, tool_call_id, part))
    return out


def _approval_answer(session_id: str, tool_call_id: str, part: dict[str, Any]) -> Submission:
    """The approval decision a tool part in the state ``approval-responded`` carries.

    Raises:
        RequestValidationError: another state, or an ``approval`` without a string ``id``, a
            boolean ``approved`` and an optional string ``reason`` (``cause: approval``).
    """
    approval = part.get("approval")
    if part["state"] != "approval-responded" or not isinstance(approval, dict):
        raise _invalid("approval")
    approval_id, approved = approval.get("id"), approval.get("approved")
    reason = approval.get("reason")
    if (
        not isinstance(approval_id, str)
        or not isinstance(approved, bool)
        or not isinstance(reason, str | None)
    ):
        raise _invalid("approval")
    shown = part.get("input")
    return Submission(
        session_id,
        tool_call_id,
        "approval-response",
        approval_id=approval_id,
        approved=approved,
        reason=reason,
        shown_input=shown if isinstance(shown, dict) else None,
    )


def _result_answer(session_id: str, tool_call_id: str, part: dict[str, Any]) -> Submission:
    """The client tool's result (``output-available``) or error (``output-error``) a tool
    part carries.

    Raises:
        RequestValidationError: an error without a string ``errorText`` (``cause:
            error_text``) or another state (``cause: state``).
    """
    state = part["state"]
    if state == "output-available":
        return Submission(session_id, tool_call_id, "client-tool-result", result=part.get("output"))
    if state == "output-error":
        text = part.get("errorText")
        if not isinstance(text, str):
            raise _invalid("error_text")
        return Submission(session_id, tool_call_id, "client-tool-result", error=text)
    raise _invalid("state")


def user_text(message: UIMessage) -> str:
    """The text parts of a user message, joined by blank lines."""
    texts = [
        p["text"]
        for p in message.parts
        if p.get("type") == "text" and isinstance(p.get("text"), str)
    ]
    return "\n\n".join(t for t in texts if t)


def message_id_for(run_id: str) -> str:
    """The assistant message id of a turn: stable across its continuation runs."""
    return f"msg_{run_id.split(':', 1)[0]}"


async def ui_message_stream(
    runtime: AgentRuntime,
    session_id: str,
    after: int,
    message_id: str | None,
    *,
    poll_seconds: float = POLL_SECONDS,
) -> AsyncIterator[bytes]:
    """The UI message stream of the session's events after ``after``, ending with ``[DONE]``.

    Calls the session waits on that the events did not show (a sub-agent's calls, surfaced at
    the root) are sent before the stream finishes with ``tool-calls``.
    """
    ui = UIMessageStream(message_id)
    yield encode_chunks(ui.start())
    async for item in follow_events(runtime, session_id, after, poll_seconds):
        if item is None:
            yield KEEP_ALIVE
            continue
        if item.type == "suspended":
            view = await runtime.status(session_id)
            yield encode_chunks(ui.pending(unanswered_calls(view)))
        yield encode_chunks(ui.translate(item.dump()))
        if ui.finished:
            break
    if not ui.finished:
        view = await runtime.status(session_id)
        if is_parked(view):
            yield encode_chunks([*ui.pending(unanswered_calls(view)), *ui.finish("tool-calls")])
        else:
            yield encode_chunks(ui.finish("stop"))
    yield DONE


async def _finished_stream(message_id: str | None) -> AsyncIterator[bytes]:
    """A stream that starts and finishes: the client's tool step ends, nothing more runs."""
    ui = UIMessageStream(message_id)
    yield encode_chunks([*ui.start(), *ui.finish("stop")])
    yield DONE


async def _replay_stream(message_id: str, view: dict[str, Any]) -> AsyncIterator[bytes]:
    ui = UIMessageStream(message_id)
    yield encode_chunks(
        [*ui.start(), *ui.pending(unanswered_calls(view)), *ui.finish("tool-calls")]
    )
    yield DONE


def _stream(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        end_on_outage(body, _OUTAGE_TAIL),
        media_type="text/event-stream",
        headers=UI_MESSAGE_STREAM_HEADERS,
    )


class _Chat:
    def __init__(
        self,
        api: RouteContext,
        agent_type: str,
        poll_seconds: float,
        token_issuer: TokenIssuer | None,
    ) -> None:
        self.api = api
        self.runtime = api.runtime
        self.agent_type = agent_type
        self.poll_seconds = poll_seconds
        self.token_issuer = token_issuer

    async def new_session(self, request: Request) -> Response:
        """A new chat id, and its token when tokens are on (the hook sees ``chat-new``)."""
        _set_context(request, None, None)
        await run_authenticate(self.api.authenticate, request, "chat-new")
        chat_id = f"ses_{uuid.uuid4().hex}"
        out: dict[str, Any] = {"id": chat_id}
        if self.token_issuer is not None:
            out["token"] = self.token_issuer(chat_id)
        return JSONResponse(out)

    async def post(self, request: Request) -> Response:
        checked = await self.api.body(request, ChatRequest, "chat")
        body, session_id = checked.body, checked.session
        if body.trigger == "regenerate-message":
            # Regenerating would rewrite the server's history; send a new message instead.
            raise _invalid("trigger")
        last = body.messages[-1]
        if last.role == "assistant":
            return await self._answer(session_id, last, body.message_id or last.id or None)
        if last.role != "user":
            raise _invalid("message")
        text = user_text(last)
        if not text.strip():
            raise _invalid("message")
        after = await _last_sequence(self.runtime, session_id)
        handle = await self.api.start(request, self.agent_type, text, session_id)
        return _stream(
            ui_message_stream(
                self.runtime,
                session_id,
                after,
                message_id_for(handle.run_id),
                poll_seconds=self.poll_seconds,
            )
        )

    async def _answer(
        self, session_id: str, message: UIMessage, message_id: str | None
    ) -> Response:
        view = await self.runtime.status(session_id)
        pending = {p["toolCallId"]: p for p in view["pendingToolCalls"]}
        answers = answers_in(session_id, message, pending)
        if not answers:
            return _stream(_finished_stream(message_id))
        after = await _last_sequence(self.runtime, session_id)
        stored = await self.api.submit(answers, message=REQUEST_INVALID_MESSAGE)
        kinds = [a.continuation.kind for a in stored if a.continuation is not None]
        if "new_run" not in kinds:
            return _stream(_finished_stream(message_id))
        return _stream(
            ui_message_stream(
                self.runtime, session_id, after, message_id, poll_seconds=self.poll_seconds
            )
        )

    async def reconnect(self, request: Request, chat_id: str) -> Response:
        await self.api.query(request, "chat-stream", chat_id)
        try:
            view = await self.runtime.status(chat_id)
        except SessionNotFoundError:
            return Response(status_code=204)
        if view["status"] in ENDED_STATUSES:
            return Response(status_code=204)
        run_id = view["runId"] or ""
        message_id = message_id_for(run_id)
        if is_parked(view):
            return _stream(_replay_stream(message_id, view))
        after = await _run_start(self.runtime, chat_id, view["runId"])
        return _stream(
            ui_message_stream(
                self.runtime, chat_id, after, message_id, poll_seconds=self.poll_seconds
            )
        )


def create_chat_router(
    runtime: AgentRuntime,
    *,
    agent_type: str,
    authenticate: AuthHook | None = None,
    allow_unauthenticated: bool = False,
    service_name: str | None = None,
    verbose_validation_errors: bool = False,
    rate_limit_per_minute: int | SlidingWindowLimiter | None = None,
    poll_seconds: float = POLL_SECONDS,
    token_issuer: TokenIssuer | None = None,
) -> APIRouter:
    """A Vercel AI SDK compatible chat endpoint over ``runtime``: ``POST /chat/sessions``,
    ``POST /chat`` and ``GET /chat/{id}/stream`` (see the module docstring and docs/ai-sdk.md).

    Args:
        runtime: the runtime to serve (launched by the app's lifespan: ``lifespan_for``).
        agent_type: the agent every chat runs.
        authenticate: ``authenticate(request, operation)`` with the operations ``chat-new``,
            ``chat`` and ``chat-stream``; ``request_session_id(request)`` is the chat's id
            (``None`` for ``chat-new``).
        allow_unauthenticated: serve without a hook (only behind an authenticating proxy).
        service_name: tags every log event with ``service`` (one name per process) and names
            this deployment in the unauthenticated-mode warning.
        verbose_validation_errors: validation details in the 400 answers (development only).
        rate_limit_per_minute: tool answers per minute per chat; ``True`` for the default
            (``DEFAULT_SUBMIT_RATE_LIMIT``); ``None`` disables the limit. Pass the
            ``SlidingWindowLimiter`` given to ``create_router`` to share each session's window.
        poll_seconds: how often an open stream polls the store for new events.
        token_issuer: ``issue(chat_id) -> token``; ``POST /chat/sessions`` answers its
            ``token`` (``session_token_auth`` builds one).

    Raises:
        ConfigError: neither ``authenticate`` nor ``allow_unauthenticated=True``.
    """
    configure_router(
        runtime, authenticate, allow_unauthenticated, service_name, "chat endpoint", "chats"
    )
    limiter = limiter_for(rate_limit_per_minute)
    chat = _Chat(
        RouteContext(runtime, authenticate, verbose_validation_errors, limiter),
        agent_type,
        poll_seconds,
        token_issuer,
    )
    router = APIRouter(route_class=HelixRoute)
    stream_doc = event_stream_doc(
        "A Vercel AI SDK UI message stream (`data: <chunk JSON>`, then `data: [DONE]`).",
        "A UI message chunk (JSON), or `[DONE]` at the end.",
        json_data=False,
    )
    _add_new_chat_route(router, chat)
    _add_post_chat_route(router, chat, stream_doc)
    _add_reconnect_route(router, chat, stream_doc)
    return router


def _add_new_chat_route(router: APIRouter, chat: _Chat) -> None:
    """Register ``POST /chat/sessions`` (a new chat id and its token) on ``router``."""

    @router.post(
        "/chat/sessions",
        summary="Create a chat (Vercel AI SDK): a new chat id and its session token",
        description="Call it before a chat's first message. The authenticate hook sees the "
        "operation `chat-new` (an embedding app gates it with its own user authentication). "
        "Send `id` as the chat's id and `token` as `Authorization: Bearer` on `/chat`.",
        response_model=ChatSessionResponse,
        responses=AUTH_RESPONSES,
        openapi_extra=CREATES_SESSION_DOC,
    )
    async def new_chat(request: Request) -> Response:
        return await chat.new_session(request)


def _add_post_chat_route(router: APIRouter, chat: _Chat, stream_doc: dict[str, Any]) -> None:
    """Register ``POST /chat`` (a message or the answers to pending calls, answered with a UI
    message stream documented by ``stream_doc``) on ``router``."""

    @router.post(
        "/chat",
        summary="Chat (Vercel AI SDK): send a message or answer pending tool calls",
        description="The AI SDK chat transport's body. The last user message starts a turn; "
        "a last assistant message answers the pending calls its tool parts settle. Answers "
        "a UI message stream.",
        response_class=StreamingResponse,
        responses={
            200: stream_doc,
            **BODY_RESPONSES,
            400: error_response_doc(
                "`validation_error`, `INVALID_RESULT` (a tool output failed the tool's "
                "output schema) or `approval_mismatch`."
            ),
            404: error_response_doc("`framework_agent_not_found` or `state_not_found`."),
            409: error_response_doc(
                "`state_already_running`: a new message while a turn runs (retryable) or "
                "waits on calls (not retryable); or `state_run_superseded`."
            ),
            429: error_response_doc(
                "`rate_limited` (retryable, `Retry-After`): too many tool answers."
            ),
        },
        openapi_extra=raw_json_body_doc(ChatRequest),
    )
    async def post_chat(request: Request) -> Response:
        return await chat.post(request)


def _add_reconnect_route(router: APIRouter, chat: _Chat, stream_doc: dict[str, Any]) -> None:
    """Register ``GET /chat/{chat_id}/stream`` (the AI SDK's reconnect) on ``router``."""

    @router.get(
        "/chat/{chat_id}/stream",
        summary="Reconnect to a chat's active stream (Vercel AI SDK resume)",
        description="204 without an active turn; a parked turn replays its pending calls; a "
        "running turn streams from its current run's start.",
        response_class=StreamingResponse,
        responses={
            200: stream_doc,
            204: {"description": "No active turn."},
            **AUTH_RESPONSES,
            400: error_response_doc("`validation_error`: an invalid chat id."),
        },
    )
    async def chat_stream(
        request: Request,
        chat_id: ChatIdPath,
    ) -> Response:
        return await chat.reconnect(request, chat_id)
