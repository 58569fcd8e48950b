"""An MCP server's tools in an agent: ``mcp_stdio`` and ``mcp_http`` (docs/mcp.md).

A toolset lists the server's tools (again when the listing the server allows to cache is
stale), names each ``<toolset>__<tool>`` so two servers cannot clash, keeps those of its
allow-list, and gives the model each tool's input schema as the server wrote it. A call is
an ordinary server tool: a recorded DBOS step (docs/server-tools.md) whose request carries
the step's key in ``_meta`` (``IDEMPOTENCY_META_KEY``), behind an approval when the tool is
gated. A server that is down, breaks or times out is tried again with backoff, then the
model reads the failed result ``mcp_server_unavailable``; a tool that answers an error,
``mcp_tool_error``. Neither fails the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, ConfigDict

from ..core.llm import ToolSchema
from ..core.tools import Tool, ToolAsks, ToolFailure, call_key, tool_answers
from ..errors import ToolDefinitionError
from ..observability.log import log_event
from .link import Link

__all__ = [
    "DEFAULT_LIST_TTL",
    "IDEMPOTENCY_META_KEY",
    "MCP_SERVER_UNAVAILABLE",
    "MCP_TOOL_ERROR",
    "Approval",
    "MCPTool",
    "MCPToolset",
    "mcp_http",
    "mcp_stdio",
]

#: The ``_meta`` key of a call's idempotency key: the same for every attempt of one call.
IDEMPOTENCY_META_KEY = "io.helix-dbos/idempotencyKey"
#: The failed result of a call whose server was down, broke or timed out on every attempt.
MCP_SERVER_UNAVAILABLE = "mcp_server_unavailable"
#: The failed result of a call the server answered with an error (or a request it refused).
MCP_TOOL_ERROR = "mcp_tool_error"
#: Seconds a listing is kept when the server says nothing of how long it may be cached.
DEFAULT_LIST_TTL = 300.0
#: Seconds before a failed listing is tried again.
LIST_RETRY_SECONDS = 5.0
#: JSON-RPC codes of a connection that failed (closed, timed out), not of a server's answer.
_TRANSPORT_CODES = frozenset({types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT})

Approval = Literal["destructive", "all", "none"]
"""Which tools need a human's approval by default: ``destructive`` (those the server's
annotations do not say are read-only or non-destructive), ``all`` or ``none``."""


class MCPArguments(BaseModel):
    """An MCP tool's arguments as the model gave them: the server validates them."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class MCPTool(Tool):
    """A tool of an MCP server, as the agent's model sees it."""

    remote_name: str = ""
    """The tool's name on its server."""
    input_schema: dict[str, Any] = field(default_factory=dict, compare=False)
    """The tool's input schema as the server listed it."""

    def schema(self) -> ToolSchema:
        """The tool with the server's own input schema."""
        return ToolSchema(
            name=self.name, description=self.description, input_schema=self.input_schema
        )


@dataclass(eq=False)
class MCPToolset:
    """The tools of one MCP server, for ``define_agent(tools=[...])``. Build it with
    ``mcp_stdio`` or ``mcp_http``."""

    name: str
    """The namespace: the server's tool ``t`` is the agent's ``<name>__t``."""
    connect: Any
    """A ``StdioServerParameters``, or ``(url, headers)`` for Streamable HTTP."""
    allow: frozenset[str] | None = None
    """The server's tools the agent may use (``None``: all)."""
    approval: Approval = "destructive"
    require_approval: frozenset[str] = frozenset()
    """Tools gated whatever their annotations say."""
    skip_approval: frozenset[str] = frozenset()
    """Tools never gated whatever their annotations say."""
    timeout: float = 30.0
    """Seconds one attempt of a call (or of a listing) may take."""
    attempts: int = 3
    """Attempts of a call before ``mcp_server_unavailable``."""
    backoff: float = 0.5
    """Seconds before the second attempt; doubled before each next one."""
    list_ttl: float | None = None
    """Seconds a listing is kept; ``None``: as long as the server's ``ttlMs`` allows."""
    approval_timeout: float | None = None
    """Seconds an approval of one of these tools waits (the agent's deadline otherwise)."""
    _listed: dict[str, MCPTool] = field(default_factory=dict, init=False, repr=False)
    _fresh_until: float = field(default=0.0, init=False, repr=False)
    _link: Link = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name or "__" in self.name or not self.name.replace("_", "").isalnum():
            raise ToolDefinitionError(
                f"MCP toolset {self.name!r}: a name of letters, digits and single underscores"
            )
        if self.attempts < 1 or not self.timeout > 0 or self.backoff < 0:
            raise ToolDefinitionError(f"MCP toolset {self.name!r}: bad attempts/timeout/backoff")
        self._link = Link(self._client)

    def _client(self) -> Client:
        if isinstance(self.connect, StdioServerParameters):
            return Client(self.connect, read_timeout_seconds=self.timeout)
        url, headers = self.connect
        return Client(_http(url, headers, self.timeout))

    # -- what the model sees -------------------------------------------------------------

    def tools(self) -> tuple[Tool, ...]:
        """The tools as last listed, allowed and namespaced."""
        return tuple(self._listed.values())

    def tool(self, name: str) -> Tool | None:
        """The tool ``name``; before this process listed the server (a recovered turn's call),
        a stand-in whose call reaches the server all the same."""
        prefix = f"{self.name}__"
        if not name.startswith(prefix):
            return None
        if self._listed or self._fresh_until:
            return self._listed.get(name)
        remote = name[len(prefix) :]
        if self.allow is not None and remote not in self.allow:
            return None
        return self._build(types.Tool(name=remote, input_schema={"type": "object"}))

    def gated(self, remote: str, annotations: types.ToolAnnotations | None) -> bool:
        """Whether a call of the server's tool ``remote`` waits for a human's approval.

        By name first (``require_approval``, ``skip_approval``), then ``approval``; for
        ``destructive`` the annotations are read as the MCP specification defines them:
        ``destructiveHint`` is true unless the server says otherwise, and means nothing for
        a ``readOnlyHint`` tool. A tool without annotations is therefore gated.
        """
        if remote in self.require_approval:
            return True
        if remote in self.skip_approval or self.approval == "none":
            return False
        if self.approval == "all" or annotations is None:
            return True
        if annotations.read_only_hint:
            return False
        return annotations.destructive_hint is not False

    def _build(self, listed: types.Tool) -> MCPTool:
        remote = listed.name

        async def call(args: MCPArguments) -> Any:
            return await self.call(remote, args.model_dump())

        return MCPTool(
            name=f"{self.name}__{remote}",
            description=listed.description or listed.title or remote,
            input_model=MCPArguments,
            output_model=None,
            execution="server",
            function=call,
            require_approval=self.gated(remote, listed.annotations),
            client_tool_timeout=self.approval_timeout,
            remote_name=remote,
            input_schema=dict(listed.input_schema),
        )

    # -- the server ----------------------------------------------------------------------

    async def refresh(self) -> None:
        """List the server's tools if the listing is stale. A failure keeps the last listing
        (logged ``mcp.list_failed``) and is tried again after ``LIST_RETRY_SECONDS``."""
        if time.monotonic() < self._fresh_until:
            return
        try:
            listed, ttl = await asyncio.wait_for(self._list(), self.timeout)
        except Exception as exc:
            await self._link.reset()
            self._fresh_until = time.monotonic() + LIST_RETRY_SECONDS
            log_event("mcp.list_failed", toolset=self.name, error=_describe(exc))
            return
        kept = (t for t in listed if self.allow is None or t.name in self.allow)
        self._listed = {tool.name: tool for tool in map(self._build, kept)}
        self._fresh_until = time.monotonic() + (self.list_ttl if self.list_ttl is not None else ttl)

    async def _list(self) -> tuple[list[types.Tool], float]:
        client = await self._link.client()
        tools: list[types.Tool] = []
        cursor: str | None = None
        ttl = DEFAULT_LIST_TTL
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            if page.ttl_ms is not None:
                ttl = page.ttl_ms / 1000
            cursor = page.next_cursor
            if not cursor:
                return tools, ttl

    async def call(self, remote: str, arguments: dict[str, Any]) -> Any:
        """Call the server's tool ``remote``: what the model reads.

        Raises:
            ToolFailure: ``mcp_tool_error`` (the server answered an error) or
                ``mcp_server_unavailable`` (no answer after ``attempts`` tries).
        """
        meta = cast(types.RequestParamsMeta, {IDEMPOTENCY_META_KEY: call_key() or ""})
        answers = tool_answers() or {}
        responses = _responses(answers.get("responses"))
        for attempt in range(1, self.attempts + 1):
            try:
                client = await asyncio.wait_for(self._link.client(), self.timeout)
                answer = await asyncio.wait_for(
                    client.session.call_tool(
                        remote,
                        arguments,
                        meta=meta,
                        input_responses=responses,
                        request_state=answers.get("state"),
                        allow_input_required=True,
                    ),
                    self.timeout,
                )
            except MCPError as exc:
                if exc.error.code not in _TRANSPORT_CODES:
                    raise ToolFailure(MCP_TOOL_ERROR, f"The MCP server refused: {exc}") from exc
                failure: Exception = exc
            except Exception as exc:  # down, broken, timed out: tried again
                failure = exc
            else:
                return _read(answer)
            await self._link.reset()
            if attempt < self.attempts:
                log_event("mcp.call_retry", toolset=self.name, tool=remote, attempt=attempt)
                await asyncio.sleep(self.backoff * 2 ** (attempt - 1))
        raise ToolFailure(
            MCP_SERVER_UNAVAILABLE,
            f"The MCP server {self.name!r} did not answer the call of {remote!r} after "
            f"{self.attempts} attempts: {_describe(failure)}",
        )

    async def aclose(self) -> None:
        """Close the connection (a stdio server's subprocess ends)."""
        await self._link.aclose()


def _responses(given: Any) -> types.InputResponses | None:
    """A person's answers, as the SDK's ``inputResponses`` (elicitation results)."""
    if not given:
        return None
    return {key: types.ElicitResult.model_validate(value) for key, value in given.items()}


def _read(answer: types.CallToolResult | types.InputRequiredResult) -> Any:
    """What the model reads of a server's answer: its structured content, else its text.

    Raises:
        ToolAsks: an ``input_required`` answer: the turn parks on the call (its forms and
            request state in the call's pending entry).
        ToolFailure: an error result (``mcp_tool_error``).
    """
    if isinstance(answer, types.InputRequiredResult):
        requests = {
            key: request.model_dump(mode="json", by_alias=True, exclude_none=True)
            for key, request in (answer.input_requests or {}).items()
        }
        raise ToolAsks(requests, answer.request_state)
    texts = [block.text for block in answer.content if isinstance(block, types.TextContent)]
    if answer.is_error:
        raise ToolFailure(MCP_TOOL_ERROR, "\n".join(texts) or "The MCP tool failed")
    if answer.structured_content is not None:
        return answer.structured_content
    if len(texts) == len(answer.content):
        return "\n".join(texts)
    return [
        block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in answer.content
    ]


@contextlib.asynccontextmanager
async def _http(url: str, headers: dict[str, str], timeout: float) -> AsyncIterator[Any]:
    """Streamable HTTP to ``url`` with ``headers`` on every request."""
    limits = httpx2.Timeout(timeout, read=max(timeout, 300.0))
    async with (
        httpx2.AsyncClient(headers=headers, timeout=limits) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


def _describe(exc: BaseException) -> str:
    """An exception as one line; an exception group by its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _options(
    allow: Iterable[str] | None,
    require_approval: Iterable[str],
    skip_approval: Iterable[str],
) -> dict[str, Any]:
    return {
        "allow": None if allow is None else frozenset(allow),
        "require_approval": frozenset(require_approval),
        "skip_approval": frozenset(skip_approval),
    }


def mcp_stdio(
    name: str,
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    allow: Iterable[str] | None = None,
    approval: Approval = "destructive",
    require_approval: Iterable[str] = (),
    skip_approval: Iterable[str] = (),
    timeout: float = 30.0,
    attempts: int = 3,
    backoff: float = 0.5,
    list_ttl: float | None = None,
    approval_timeout: float | None = None,
) -> MCPToolset:
    """An MCP server run as a subprocess (``command``), spoken to over stdio.

    The runtime starts it on first use, starts it again after it died, and ends it at its
    shutdown. See ``MCPToolset`` for the options; ``approval="destructive"`` (the default)
    gates every tool the server does not annotate read-only or non-destructive.
    """
    if not command:
        raise ToolDefinitionError(f"MCP toolset {name!r}: an empty command")
    server = StdioServerParameters(
        command=command[0], args=list(command[1:]), env=dict(env) if env else None, cwd=cwd
    )
    return MCPToolset(
        name,
        server,
        approval=approval,
        timeout=timeout,
        attempts=attempts,
        backoff=backoff,
        list_ttl=list_ttl,
        approval_timeout=approval_timeout,
        **_options(allow, require_approval, skip_approval),
    )


def mcp_http(
    name: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    allow: Iterable[str] | None = None,
    approval: Approval = "destructive",
    require_approval: Iterable[str] = (),
    skip_approval: Iterable[str] = (),
    timeout: float = 30.0,
    attempts: int = 3,
    backoff: float = 0.5,
    list_ttl: float | None = None,
    approval_timeout: float | None = None,
) -> MCPToolset:
    """An MCP server at ``url``, spoken to over Streamable HTTP, with ``headers`` (its
    authentication) on every request. The options are ``mcp_stdio``'s."""
    return MCPToolset(
        name,
        (url, dict(headers or {})),
        approval=approval,
        timeout=timeout,
        attempts=attempts,
        backoff=backoff,
        list_ttl=list_ttl,
        approval_timeout=approval_timeout,
        **_options(allow, require_approval, skip_approval),
    )
