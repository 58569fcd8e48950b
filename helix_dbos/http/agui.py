"""``POST /agui/{agentType}``: the AG-UI 1.0 endpoint (``HttpAgent``, CopilotKit).

The input is AG-UI's ``RunAgentInput`` (the ``ag-ui-protocol`` models) and the answer an SSE
stream of AG-UI events (``agui_events.py``). ``threadId`` is the session: the first run on a
thread creates it. Each request is one AG-UI run, and it does one of these (``agui_input.py``
reads the input):

* it answers calls the thread waits on (``tool`` messages for client calls, ``resume`` entries
  for approvals): each answer takes the submit path of ``/submit-tool-result`` (validated,
  size-checked, idempotent, fenced, routed to the owning sub-agent), and the run streams the
  continuation, or, while the batch still waits for other calls, finishes naming them;
* its last message is a user message: it starts the thread's next turn and streams it;
* it carries nothing new: a reconnect. A thread waiting on calls replays them (and its
  interrupts); a running turn streams from its current run's start; otherwise the run just
  finishes.

What stops a request from being a run is an HTTP answer (the typed ``{error, code, retryable}``
body): authentication, a body that is not a ``RunAgentInput``, an unknown agent, the rate limit,
an unavailable store. Any other refusal is a run that ends with ``RUN_ERROR`` (our code), before
anything of the request is stored. The authenticate hook sees the operation ``agui`` with the
``threadId`` as the request's session (``agui-tools`` for ``GET /agui/{agentType}/tools``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from ag_ui.core import BaseEvent, RunErrorEvent
from fastapi import APIRouter, Path
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..core.agents import Agent
from ..core.owner import SessionOwner
from ..core.session import SubmitAnswer
from ..errors import (
    STORE_UNAVAILABLE_MESSAGE,
    AuthError,
    HelixError,
    RateLimitedError,
    RequestValidationError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from ..observability.log import log_event
from ..runtime import Submission
from .agui_events import AguiRun, encode, refusal
from .agui_input import (
    AguiRunInput,
    check_client_tools,
    client_tools,
    known_of,
    resume_answers,
    tool_answers,
    user_text,
)
from .agui_openapi import RUN_DOC, TOOLS_DOC
from .auth import run_authenticate, set_request_context
from .body import REQUEST_INVALID_MESSAGE
from .errors import HelixRoute, end_on_outage
from .frames import KEEP_ALIVE, SSE_HEADERS
from .pipeline import RouteContext
from .schemas import IDENTIFIER_MAX_LENGTH, IDENTIFIER_PATTERN
from .scope import request_owner
from .sse import ENDED_STATUSES, POLL_SECONDS, follow_events, is_parked
from .stream_points import last_sequence, run_start

__all__ = ["create_agui_router"]

#: An agent type in the path, under the identifier rule.
AgentTypePath = Annotated[
    str,
    Path(
        alias="agentType",
        min_length=1,
        max_length=IDENTIFIER_MAX_LENGTH,
        pattern=IDENTIFIER_PATTERN,
    ),
]

#: The end of a stream the store left (mid-stream it cannot be a 503).
_OUTAGE_TAIL = encode([RunErrorEvent(message=STORE_UNAVAILABLE_MESSAGE, code="store_unavailable")])
#: Refusals that are HTTP answers, not runs: the client retries or re-authenticates.
_HTTP_ONLY = (AuthError, RateLimitedError, StoreUnavailableError)

_Events = AsyncIterator[bytes]


class _Refused(Exception):
    """A resume entry the thread cannot take (its submit answered why): the run's RUN_ERROR."""

    def __init__(self, answer: SubmitAnswer, interrupt_id: str | None) -> None:
        super().__init__(answer.status)
        # The codes of our submit contract: a repeated answer, a stopped run's call, a lapsed
        # deadline, an unknown call.
        self.code = (
            answer.status
            if answer.status != "unknown_tool_call"
            else (answer.reason or "unknown_tool_call")
        )
        self.details: dict[str, Any] = {"retryable": False, "status": answer.status}
        if answer.reason:
            self.details["reason"] = answer.reason
        if interrupt_id is not None:
            self.details["interruptId"] = interrupt_id
        self.details["toolCallId"] = answer.tool_call_id


_REFUSED_MESSAGES = {
    "already_completed": "The call was already answered; nothing was stored",
    "run_stopped": "The call's run was stopped; nothing was stored",
    "deadline_lapsed": "The call's deadline has passed; nothing was stored",
}


def _stream(body: _Events) -> StreamingResponse:
    return StreamingResponse(
        end_on_outage(body, _OUTAGE_TAIL), media_type="text/event-stream", headers=SSE_HEADERS
    )


async def _frames(*events: list[BaseEvent]) -> _Events:
    for batch in events:
        yield encode(batch)


class _Agui:
    def __init__(self, api: RouteContext, poll_seconds: float) -> None:
        self.api = api
        self.runtime = api.runtime
        self.poll_seconds = poll_seconds

    async def tools(self, request: Request, agent_type: str) -> Response:
        set_request_context(request, None, None)
        await run_authenticate(self.api.authenticate, request, "agui-tools")
        agent = self.runtime.registry.get(agent_type)
        body = [tool.model_dump(mode="json", by_alias=True) for tool in client_tools(agent)]
        return JSONResponse(body)

    async def run(self, request: Request, agent_type: str) -> Response:
        checked = await self.api.body(request, AguiRunInput, "agui")
        body, thread = checked.body, checked.session
        agent = self.runtime.registry.get(agent_type)
        run = AguiRun(thread, body.run_id, known_of(body.messages))
        try:
            return _stream(await self._decide(thread, body, agent, run, request_owner(request)))
        except _HTTP_ONLY:
            raise
        except _Refused as refused:
            code, message = refused.code, _REFUSED_MESSAGES.get(refused.code)
            details = refused.details
        except HelixError as exc:
            code, message, details = str(exc.code), exc.message, {"retryable": exc.retryable}
            details.update(exc.details)
        log_event("agui.run_refused", threadId=thread, code=code, cause=details.get("cause"))
        text = message or "No pending call matches this answer; nothing was stored"
        return _stream(_frames(refusal(thread, body.run_id, code, text, details)))

    async def _view(self, thread_id: str, agent: Agent) -> dict[str, Any] | None:
        """The thread's status view (``None`` for a new thread); it must be a root session
        of ``agent``."""
        try:
            state = await self.runtime.session(thread_id)
        except SessionNotFoundError:
            return None
        if state.agent_type != agent.name or (
            state.root_session_id not in (None, state.session_id)
        ):
            raise RequestValidationError(REQUEST_INVALID_MESSAGE, cause="thread_agent")
        return await self.runtime.status(thread_id)

    async def _decide(
        self, thread: str, body: AguiRunInput, agent: Agent, run: AguiRun, owner: SessionOwner
    ) -> _Events:
        """Store what the input answers on ``thread`` (the authorized session; or start its
        turn, a new thread owned by ``owner``), then the stream to answer."""
        check_client_tools(agent, body.tools or [])
        view = await self._view(thread, agent)
        live, stale = resume_answers(thread, body.resume or [], view)
        live += tool_answers(thread, body.messages, view)
        text = user_text(body.messages)
        if live or stale:
            if text is not None:
                # Answers and a new message in one run: send the message once the turn ends.
                raise RequestValidationError(REQUEST_INVALID_MESSAGE, cause="message")
            return await self._answer(thread, live, stale, run, body.state)
        if text is not None and not await self._sent_before(thread, view, text):
            after = 0 if view is None else await last_sequence(self.runtime, thread)
            await self.runtime.start(
                agent.name,
                text,
                session_id=thread,
                principal=owner.principal,
                tenant=owner.tenant,
            )
            return self._follow(thread, after, run, body.state)
        return await self._reconnect(thread, view, run, body.state)

    async def _sent_before(self, thread: str, view: dict[str, Any] | None, text: str) -> bool:
        """Whether ``text`` is the message of the thread's active turn: a client re-sending
        its history (a reload) reconnects instead of being refused as a second message."""
        if view is None or view["status"] in ENDED_STATUSES:
            return False
        users = [m for m in await self.runtime.messages(thread) if m.role == "user"]
        return bool(users) and users[-1].content == text

    async def _answer(
        self,
        thread: str,
        live: list[Submission],
        stale: list[Submission],
        run: AguiRun,
        state: Any,
    ) -> _Events:
        stored: list[SubmitAnswer] = []
        for sub in stale:
            # A stale resume stores nothing: its answer says why it is refused. Checked before
            # any live answer is stored, so a refused run stores nothing at all.
            (answer,) = await self.api.submit([sub], message=REQUEST_INVALID_MESSAGE)
            if answer.status != "accepted":
                raise _Refused(answer, sub.approval_id)
            stored.append(answer)
        after = await last_sequence(self.runtime, thread)
        answers = await self.api.submit(live, message=REQUEST_INVALID_MESSAGE)
        taken = [a for a in answers if a.status == "accepted"]
        if answers and not taken and not stored:
            # The calls stopped or lapsed since the status was read: nothing was stored.
            raise _Refused(answers[0], live[0].approval_id)
        stored += taken
        kinds = [a.continuation.kind for a in stored if a.continuation is not None]
        if "new_run" in kinds:
            return self._follow(thread, after, run, state)
        view = await self.runtime.status(thread)
        meta = {"continuation": kinds[-1]} if kinds else None
        return _frames(run.started(), run.finish(view, state, metadata=meta))

    async def _reconnect(
        self, thread: str, view: dict[str, Any] | None, run: AguiRun, state: Any
    ) -> _Events:
        if view is None:
            return _frames(run.started(), run.finish(_empty(thread), state, observed=False))
        if view["status"] in ENDED_STATUSES or is_parked(view):
            return _frames(run.started(), run.finish(view, state, observed=False))
        after = await run_start(self.runtime, thread, view["runId"])
        return self._follow(thread, after, run, state)

    async def _follow(self, thread: str, after: int, run: AguiRun, state: Any) -> _Events:
        """The run's events: the session's events after ``after`` until the turn ends or
        parks, then its outcome."""
        yield encode(run.started())
        view: dict[str, Any] | None = None
        async for item in follow_events(self.runtime, thread, after, self.poll_seconds):
            if item is None:
                yield KEEP_ALIVE
                continue
            if item.type == "suspended":
                # Calls a sub-agent waits on are surfaced at the root: shown before the end.
                view = await self.runtime.status(thread)
                yield encode(run.pending(view))
            yield encode(run.translate(item.dump()))
            if run.turn_stopped:
                break
        if view is None:
            view = await self.runtime.status(thread)
        yield encode(run.finish(view, state))


def _empty(thread: str) -> dict[str, Any]:
    """The status view of a thread that has no session yet."""
    return {"sessionId": thread, "status": "idle", "runId": None, "pendingToolCalls": []}


def create_agui_router(api: RouteContext, *, poll_seconds: float = POLL_SECONDS) -> APIRouter:
    """The AG-UI routes over ``api`` (the router's shared request context): ``POST
    /agui/{agentType}`` and ``GET /agui/{agentType}/tools``. ``create_router`` includes them."""
    agui = _Agui(api, poll_seconds)
    router = APIRouter(route_class=HelixRoute)

    @router.post("/agui/{agentType}", **RUN_DOC)
    async def agui_run(request: Request, agent_type: AgentTypePath) -> Response:
        return await agui.run(request, agent_type)

    @router.get("/agui/{agentType}/tools", **TOOLS_DOC)
    async def agui_tools(request: Request, agent_type: AgentTypePath) -> Response:
        return await agui.tools(request, agent_type)

    return router
