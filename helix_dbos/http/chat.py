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

Refusals happen before any stream and are the typed ``{error, code, retryable, ...}`` answers
of the other routes (``INVALID_RESULT``, ``approval_mismatch``, ``state_already_running``, ...).
The authenticate hook sees the operations ``chat`` and ``chat-stream`` with the chat's id as
``request_session_id``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..errors import (
    STORE_UNAVAILABLE_MESSAGE,
    InvalidResultError,
    RequestValidationError,
    SessionNotFoundError,
)
from ..runtime.runtime import AgentRuntime
from ..runtime.submit import MISSING
from .auth import AuthHook, refuse_unless_authenticated, run_authenticate, set_request_context
from .body import (
    REQUEST_BODY_CAP_FACTOR,
    REQUEST_INVALID_MESSAGE,
    parse_json,
    read_body,
    validate_body,
)
from .errors import HelixRoute, end_on_outage
from .limits import limiter_for
from .router import (
    AUTH_RESPONSES,
    BODY_RESPONSES,
    RouteContext,
    describe_issues,
    error_response_doc,
    raw_json_body_doc,
)
from .schemas import Identifier
from .sse import (
    ENDED_STATUSES,
    POLL_SECONDS,
    follow_events,
    is_parked,
    unanswered_calls,
)
from .ui_stream import DONE, UI_MESSAGE_STREAM_HEADERS, UIMessageStream, encode_chunks

__all__ = ["ChatRequest", "UIMessage", "create_chat_router"]

#: The tool-part states that answer a pending call.
ANSWER_STATES = frozenset({"output-available", "output-error", "approval-responded"})

_KEEP_ALIVE = b": keep-alive\n\n"
#: The end of a stream the store left (mid-stream it cannot be a 503): an error, then done.
_OUTAGE_TAIL = encode_chunks([{"type": "error", "errorText": STORE_UNAVAILABLE_MESSAGE}]) + DONE
_PAGE = 1000


class UIMessage(BaseModel):
    """One AI SDK ``UIMessage``; the parts are read loosely (only tool parts and text)."""

    model_config = ConfigDict(extra="allow")

    id: str = ""
    role: Literal["system", "user", "assistant"]
    parts: list[dict[str, Any]] = Field(default_factory=list)


class ChatRequest(BaseModel):
    """The AI SDK chat transport's body; extra transport fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    id: Identifier
    """The chat's id: the ROOT session."""
    messages: list[UIMessage] = Field(min_length=1)
    trigger: str | None = None
    message_id: str | None = Field(default=None, alias="messageId")


@dataclass(frozen=True)
class _Answer:
    """A tool part that answers a pending call, as ``submit_tool_result`` arguments."""

    tool_call_id: str
    kind: Literal["client-tool-result", "approval-response"]
    result: Any = MISSING
    error: str | None = None
    approval_id: str | None = None
    approved: bool | None = None
    reason: str | None = None
    shown_input: dict[str, Any] | None = None


def _invalid(cause: str) -> RequestValidationError:
    return RequestValidationError(REQUEST_INVALID_MESSAGE, cause=cause)


def _is_tool_part(part: dict[str, Any]) -> bool:
    kind = part.get("type")
    return isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool")


def answers_in(message: UIMessage, pending: dict[str, dict[str, Any]]) -> list[_Answer]:
    """The answers an assistant message carries for the ``pending`` calls (by tool-call id).

    Parts for other calls (earlier steps' history, server tools) are ignored.

    Raises:
        RequestValidationError: a part answering a pending call has the wrong shape.
    """
    out: list[_Answer] = []
    for part in message.parts:
        if not _is_tool_part(part) or part.get("state") not in ANSWER_STATES:
            continue
        tool_call_id = part.get("toolCallId")
        call = pending.get(tool_call_id) if isinstance(tool_call_id, str) else None
        if call is None or tool_call_id is None:
            continue
        state = part["state"]
        shown = part.get("input")
        if call.get("kind") == "approval":
            approval = part.get("approval")
            if state != "approval-responded" or not isinstance(approval, dict):
                raise _invalid("approval")
            approval_id, approved = approval.get("id"), approval.get("approved")
            reason = approval.get("reason")
            if (
                not isinstance(approval_id, str)
                or not isinstance(approved, bool)
                or not isinstance(reason, str | None)
            ):
                raise _invalid("approval")
            out.append(
                _Answer(
                    tool_call_id,
                    "approval-response",
                    approval_id=approval_id,
                    approved=approved,
                    reason=reason,
                    shown_input=shown if isinstance(shown, dict) else None,
                )
            )
        elif state == "output-available":
            out.append(_Answer(tool_call_id, "client-tool-result", result=part.get("output")))
        elif state == "output-error":
            text = part.get("errorText")
            if not isinstance(text, str):
                raise _invalid("error_text")
            out.append(_Answer(tool_call_id, "client-tool-result", error=text))
        else:
            raise _invalid("state")
    return out


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


async def _last_sequence(runtime: AgentRuntime, session_id: str) -> int:
    after = 0
    while True:
        batch = await runtime.events(session_id, after, _PAGE)
        if batch:
            after = batch[-1].sequence
        if len(batch) < _PAGE:
            return after


async def _run_start(runtime: AgentRuntime, session_id: str, run_id: str | None) -> int:
    """The sequence just before the first event of ``run_id`` (0 when none is found)."""
    after = 0
    while True:
        batch = await runtime.events(session_id, after, _PAGE)
        for item in batch:
            if item.run_id == run_id:
                return item.sequence - 1
        if len(batch) < _PAGE:
            return 0
        after = batch[-1].sequence


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
            yield _KEEP_ALIVE
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
    def __init__(self, api: RouteContext, agent_type: str, poll_seconds: float) -> None:
        self.api = api
        self.runtime = api.runtime
        self.agent_type = agent_type
        self.poll_seconds = poll_seconds

    async def body(self, request: Request) -> ChatRequest:
        """Guard, read and parse the body, authenticate (``chat``), then validate it."""
        api = self.api
        cap = self.runtime.max_result_bytes * REQUEST_BODY_CAP_FACTOR
        raw = await read_body(request, cap, message=REQUEST_INVALID_MESSAGE, route="chat")
        parsed: Any = None
        parse_error: str | None = None
        try:
            parsed = parse_json(raw)
        except ValueError as exc:
            parse_error = str(exc)
        named = parsed.get("id") if isinstance(parsed, dict) else None
        set_request_context(request, named if isinstance(named, str) else None, parsed)
        await run_authenticate(api.authenticate, request, "chat")
        if parse_error is not None:
            details = {"cause": "json"}
            if api.verbose:
                details["details"] = parse_error
            raise RequestValidationError(REQUEST_INVALID_MESSAGE, **details)
        return validate_body(
            ChatRequest, parsed, message=REQUEST_INVALID_MESSAGE, verbose=api.verbose
        )

    async def submit(self, session_id: str, answer: _Answer) -> str | None:
        """Submit one answer; the kind of its continuation (``None``: nothing matched)."""
        if self.api.limiter is not None:
            self.api.limiter.hit(session_id)
        try:
            out = await self.runtime.submit_tool_result(
                session_id,
                answer.tool_call_id,
                result=answer.result,
                error=answer.error,
                kind=answer.kind,
                approval_id=answer.approval_id,
                approved=answer.approved,
                reason=answer.reason,
                shown_input=answer.shown_input,
            )
        except InvalidResultError as exc:
            if self.api.verbose:
                exc.message = describe_issues(exc)
                exc.details["issues"] = exc.issues
            raise
        except RequestValidationError as exc:
            extra: dict[str, Any] = {"cause": "submit"}
            if self.api.verbose:
                extra["details"] = exc.message
            raise RequestValidationError(REQUEST_INVALID_MESSAGE, **extra) from None
        if out.continuation is None:
            return None
        return out.continuation.kind

    async def post(self, request: Request) -> Response:
        body = await self.body(request)
        if body.trigger == "regenerate-message":
            # Regenerating would rewrite the server's history; send a new message instead.
            raise _invalid("trigger")
        session_id = body.id
        last = body.messages[-1]
        if last.role == "assistant":
            return await self._answer(session_id, last, body.message_id or last.id or None)
        if last.role != "user":
            raise _invalid("message")
        text = user_text(last)
        if not text.strip():
            raise _invalid("message")
        after = await _last_sequence(self.runtime, session_id)
        handle = await self.runtime.start(self.agent_type, text, session_id=session_id)
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
        answers = answers_in(message, pending)
        if not answers:
            return _stream(_finished_stream(message_id))
        after = await _last_sequence(self.runtime, session_id)
        kinds = [await self.submit(session_id, answer) for answer in answers]
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
    rate_limit_per_minute: int | None = None,
    poll_seconds: float = POLL_SECONDS,
) -> APIRouter:
    """A Vercel AI SDK compatible chat endpoint over ``runtime``: ``POST /chat`` and
    ``GET /chat/{id}/stream`` (see the module docstring and docs/ai-sdk.md).

    Args:
        runtime: the runtime to serve (launched by the app's lifespan: ``lifespan_for``).
        agent_type: the agent every chat runs.
        authenticate: ``authenticate(request, operation)`` with the operations ``chat`` and
            ``chat-stream``; ``request_session_id(request)`` is the chat's id.
        allow_unauthenticated: serve without a hook (only behind an authenticating proxy).
        service_name: names this deployment in the unauthenticated-mode warning.
        verbose_validation_errors: validation details in the 400 answers (development only).
        rate_limit_per_minute: tool answers per minute per chat; ``True`` for the default
            (``DEFAULT_SUBMIT_RATE_LIMIT``); ``None`` disables the limit.
        poll_seconds: how often an open stream polls the store for new events.

    Raises:
        ConfigError: neither ``authenticate`` nor ``allow_unauthenticated=True``.
    """
    refuse_unless_authenticated(
        authenticate,
        allow_unauthenticated,
        service_name or runtime.service_name,
        "chat endpoint",
        "chats",
    )
    limiter = limiter_for(rate_limit_per_minute)
    chat = _Chat(
        RouteContext(runtime, authenticate, verbose_validation_errors, limiter),
        agent_type,
        poll_seconds,
    )
    router = APIRouter(route_class=HelixRoute)
    stream_doc = {
        "description": "A Vercel AI SDK UI message stream (`data: <chunk JSON>`, then "
        "`data: [DONE]`).",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }

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
                "`state_already_running` (retryable): a new message while a turn runs or "
                "waits; or `state_run_superseded`."
            ),
            429: error_response_doc(
                "`rate_limited` (retryable, `Retry-After`): too many tool answers."
            ),
        },
        openapi_extra=raw_json_body_doc(ChatRequest),
    )
    async def post_chat(request: Request) -> Response:
        return await chat.post(request)

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
        chat_id: str = Path(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$"),
    ) -> Response:
        return await chat.reconnect(request, chat_id)

    return router
