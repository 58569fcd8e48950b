"""``POST /mcp``: the runtime's agents served as MCP tools, with the Tasks extension.

Each agent is a tool whose input is a message (and an optional session id). A request that
declares the Tasks extension (``io.modelcontextprotocol/tasks``) gets a task at once (its
state machine: ``mcp_tasks.py``); one that does not waits for the turn: its answer, or
``input_required`` when the turn parks on an approval or a client call, whose retry with
``inputResponses`` submits (its ``requestState`` is the task's id, plain text any process
accepts: what it names is checked like any request's session). The SDK serves the protocol
(stateless Streamable HTTP, the 2026-07-28 revision); every request passes the same
authenticate hook, tokens and tenant wall as the other routes, per operation: ``start``
(a call without a session), ``resume`` (with one), ``status`` (``tasks/get``),
``submit-tool-result`` (``tasks/update``, a retry's answers), ``interrupt``
(``tasks/cancel``) and ``mcp-tools`` (``tools/list``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from .. import __version__
from ..core.clock import now_ms
from ..errors import AuthError, HelixError
from ..runtime import AgentRuntime
from .auth import (
    AuthHook,
    TokenIssuer,
    refuse_unless_authenticated,
    request_decider,
    run_authenticate,
    set_request_context,
)
from .mcp_tasks import (
    TASKS_EXTENSION,
    TaskParams,
    TaskUpdateParams,
    input_requests,
    parse_task_id,
    submit_answers,
    task_body,
    task_id,
    task_status,
    wants_tasks,
)
from .scope import enforce_tenant, request_owner

__all__ = ["SESSION_TOKEN_META_KEY", "MCPEndpoint", "agent_arguments", "mount_mcp"]

#: The ``_meta`` key of a new task's session token, on a server with session tokens.
SESSION_TOKEN_META_KEY = "io.helix-dbos/sessionToken"

#: Seconds a call without Tasks waits for its turn to end or park before it answers.
WAIT_SECONDS = 60.0
#: Seconds between two reads of the turn while such a call waits.
POLL_SECONDS = 0.05
_INPUT = {
    "type": "object",
    "properties": {"message": {"type": "string"}},
    "required": ["message"],
    "additionalProperties": False,
}
_INPUT["properties"]["sessionId"] = {  # type: ignore[index]
    "type": "string",
    "description": "Continue this session (a new one when absent)",
}


def agent_arguments(args: dict[str, Any]) -> tuple[str, str | None]:
    """An agent tool's arguments: its message and the session to continue (``None``: a new
    one). One spelling per field, as every body our routes accept.

    Raises:
        MCPError: ``INVALID_PARAMS``: no message, a name the schema does not document
            (``session_id`` included), or a value of the wrong type.
    """
    unknown = sorted(set(args) - {"message", "sessionId"})
    if unknown:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown arguments: {unknown}")
    message, session_id = args.get("message"), args.get("sessionId")
    if not isinstance(message, str):
        raise MCPError(code=types.INVALID_PARAMS, message="An agent's name and a message")
    if session_id is not None and not isinstance(session_id, str):
        raise MCPError(code=types.INVALID_PARAMS, message="sessionId is a string")
    return message, session_id


def _refused(exc: HelixError) -> MCPError:
    """A refusal as the JSON-RPC error the client reads: our code and status in ``data``."""
    return MCPError(
        code=types.INVALID_PARAMS,
        message=exc.message if hasattr(exc, "message") else str(exc),
        data={"code": str(exc.code), "status": exc.http_status},
    )


class MCPEndpoint:
    """The MCP server over a runtime: an ASGI app to mount at ``/mcp`` and run ``running()`` in
    the app's lifespan."""

    def __init__(
        self,
        runtime: AgentRuntime,
        *,
        authenticate: AuthHook | None = None,
        allow_unauthenticated: bool = False,
        service_name: str | None = None,
        token_issuer: TokenIssuer | None = None,
        wait_seconds: float = WAIT_SECONDS,
        checked: bool = False,
    ) -> None:
        # ``checked``: mounted by the router, which has refused or warned for all its routes
        # (one warning a server, not one a route group).
        if not checked:
            refuse_unless_authenticated(
                authenticate, allow_unauthenticated, service_name, "MCP endpoint", "agents"
            )
        self.runtime = runtime
        self.authenticate = authenticate
        self.token_issuer = token_issuer
        self.wait_seconds = wait_seconds
        server: Server[Any] = Server(
            "helix-dbos",
            version=__version__,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        server.extensions[TASKS_EXTENSION] = {}
        server.add_request_handler("tasks/get", TaskParams, self._get)
        server.add_request_handler("tasks/update", TaskUpdateParams, self._update)
        server.add_request_handler("tasks/cancel", TaskParams, self._cancel)
        self.server = server
        self.manager = StreamableHTTPSessionManager(app=server, stateless=True, json_response=True)
        self._started = False
        self._starting = asyncio.Lock()
        self._held: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app of ``/mcp`` (an object, not a function: Starlette serves it as is)."""
        if not self._started:
            await self._start_here()
        await self.manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """What the SDK's transport runs while the app serves (the app's lifespan)."""
        if self._started:  # started by a request already (below): it runs on
            yield
            return
        self._started = True
        async with self.manager.run():
            yield

    async def _start_here(self) -> None:
        """Start the transport at the first request of an app that runs no lifespan (an
        embedding app served with its lifespan off): a task of this event loop holds it."""
        async with self._starting:
            if self._started:
                return
            self._started = True
            ready = asyncio.Event()

            async def hold() -> None:
                async with self.manager.run():
                    ready.set()
                    await asyncio.Event().wait()  # for the life of the event loop

            self._held = asyncio.get_running_loop().create_task(hold())
            await ready.wait()

    # -- authorization -------------------------------------------------------------------

    async def _authorize(
        self, ctx: ServerRequestContext[Any], operation: str, session_id: str | None
    ) -> Request:
        request = ctx.request
        if not isinstance(request, Request):
            raise MCPError(code=types.INVALID_REQUEST, message="POST /mcp over HTTP only")
        set_request_context(request, session_id, None)
        try:
            await run_authenticate(self.authenticate, request, operation)
            await enforce_tenant(self.runtime, request, session_id)
        except AuthError as exc:
            raise _refused(exc) from None
        return request

    # -- tools ---------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        await self._authorize(ctx, "mcp-tools", None)
        tools = [
            types.Tool(
                name=agent.name,
                description=agent.instructions or f"Run the {agent.name} agent",
                input_schema=_INPUT,
            )
            for agent in self.runtime.registry
        ]
        return types.ListToolsResult(tools=tools, ttl_ms=0)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> Any:
        if params.request_state is not None:
            return await self._retry(ctx, params, params.request_state)
        if params.name not in self.runtime.registry:
            raise MCPError(code=types.INVALID_PARAMS, message="An agent's name and a message")
        message, session_id = agent_arguments(params.arguments or {})
        request = await self._authorize(ctx, "resume" if session_id else "start", session_id)
        owner = request_owner(request)
        try:
            handle = await self.runtime.start(
                params.name, message, session_id, principal=owner.principal, tenant=owner.tenant
            )
        except HelixError as exc:
            raise _refused(exc) from None
        created = now_ms()
        tid = task_id(handle.session_id, handle.run_id, created)
        if wants_tasks(ctx.meta):
            view = await self.runtime.status(handle.session_id)
            body = {"resultType": "task", **task_body(tid, view, created)}
            if self.token_issuer is not None:  # what /start answers: the session's token
                body["_meta"] = {SESSION_TOKEN_META_KEY: self.token_issuer(handle.session_id)}
            return body
        return await self._answer(handle.session_id, tid)

    async def _retry(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, state: str
    ) -> Any:
        """A client without Tasks calls again with ``inputResponses``: they are submitted,
        and the call waits for the turn again."""
        parsed = parse_task_id(state)
        if parsed is None:
            raise MCPError(code=types.INVALID_PARAMS, message="Unknown requestState")
        session_id = parsed[0]
        request = await self._authorize(ctx, "submit-tool-result", session_id)
        responses = {
            key: value.model_dump(mode="json", by_alias=True, exclude_none=True)
            for key, value in (params.input_responses or {}).items()
        }
        view = await self.runtime.status(session_id)
        try:
            await submit_answers(
                self.runtime, session_id, view, responses, request_decider(request)
            )
        except HelixError as exc:
            raise _refused(exc) from None
        return await self._answer(session_id, state)

    async def _answer(self, session_id: str, tid: str) -> Any:
        """The turn's end, or ``input_required`` when it parks (its retry names ``tid``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_seconds
        view = await self.runtime.status(session_id)
        while task_status(view) == "working" and loop.time() < deadline:
            await asyncio.sleep(POLL_SECONDS)
            view = await self.runtime.status(session_id)
        status = task_status(view)
        if status == "input_required":
            requests = await input_requests(self.runtime, view)
            return {"resultType": "input_required", "inputRequests": requests, "requestState": tid}
        return await self._result(session_id, view)

    async def _result(self, session_id: str, view: dict[str, Any]) -> dict[str, Any]:
        """The tool result of a turn that ended (or is still working)."""
        status = task_status(view)
        if status == "completed":
            messages = await self.runtime.messages(session_id)
            text = next((m.content for m in reversed(messages) if m.role == "assistant"), "")
            return {
                "resultType": "complete",
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"sessionId": session_id, "text": text},
                "isError": False,
            }
        error = view.get("error") or {}
        what = {"failed": "failed", "cancelled": "was cancelled"}.get(status, "is still working")
        detail = f": {error.get('message')}" if error.get("message") else ""
        return {
            "resultType": "complete",
            "content": [{"type": "text", "text": f"The turn {what}{detail}"}],
            "structuredContent": {"sessionId": session_id, "status": status},
            "isError": status != "working",
        }

    # -- tasks ---------------------------------------------------------------------------

    async def _task(
        self, ctx: ServerRequestContext[Any], params: TaskParams, operation: str
    ) -> tuple[str, int]:
        parsed = parse_task_id(params.task_id)
        if parsed is None:
            raise MCPError(code=types.INVALID_PARAMS, message="Unknown task")
        session_id, _run, created = parsed
        await self._authorize(ctx, operation, session_id)
        return session_id, created

    async def _get(self, ctx: ServerRequestContext[Any], params: TaskParams) -> dict[str, Any]:
        session_id, created = await self._task(ctx, params, "status")
        try:
            view = await self.runtime.status(session_id)
        except HelixError as exc:
            raise _refused(exc) from None
        body = task_body(params.task_id, view, created)
        if body["status"] == "completed":
            body["result"] = await self._result(session_id, view)
        elif body["status"] == "input_required":
            body["inputRequests"] = await input_requests(self.runtime, view)
        elif body["status"] == "failed":
            body["error"] = {"code": types.INTERNAL_ERROR, "message": body.get("statusMessage", "")}
        return body

    async def _update(
        self, ctx: ServerRequestContext[Any], params: TaskUpdateParams
    ) -> dict[str, Any]:
        session_id, _created = await self._task(ctx, params, "submit-tool-result")
        try:
            view = await self.runtime.status(session_id)
            answered = await submit_answers(
                self.runtime, session_id, view, params.input_responses, request_decider(ctx.request)
            )
        except HelixError as exc:
            raise _refused(exc) from None
        return {"_meta": {"io.helix-dbos/answers": answered}}

    async def _cancel(self, ctx: ServerRequestContext[Any], params: TaskParams) -> dict[str, Any]:
        session_id, _created = await self._task(ctx, params, "interrupt")
        try:
            await self.runtime.interrupt(session_id)
        except HelixError as exc:
            raise _refused(exc) from None
        return {}


def mount_mcp(app: Any, endpoint: MCPEndpoint) -> None:
    """Serve ``endpoint`` at ``/mcp`` of a FastAPI ``app`` or ``APIRouter``, its transport
    running in the lifespan (inside the lifespan it already has). A router's lifespan runs in
    the lifespan of the app that includes it (FastAPI merges them)."""
    from starlette.routing import Route

    router = getattr(app, "router", app)
    router.routes.append(Route("/mcp", endpoint=endpoint, methods=["POST"]))
    inner = router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(served: Any) -> AsyncIterator[Any]:
        async with inner(served) as state, endpoint.running():
            yield state

    router.lifespan_context = lifespan
