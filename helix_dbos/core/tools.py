"""Declaring tools: where they execute, their schemas, deadlines and approval gates."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from ..errors import ToolDefinitionError
from .approval_policy import ApprovalPolicy, check_policy
from .expiry import OnTimeout, check_on_timeout, check_remind
from .llm import ToolSchema

__all__ = [
    "COMPANION_PREFIX",
    "RESERVED_TOOL_NAME_PREFIXES",
    "SUBAGENT_PREFIX",
    "Execution",
    "Tool",
    "ToolAsks",
    "ToolFailure",
    "ToolFunction",
    "Toolset",
    "call_key",
    "define_tool",
    "tool_answers",
]

SUBAGENT_PREFIX = "subagent__"
COMPANION_PREFIX = "companion__"
#: Prefixes reserved for framework-built tools (sub-agent routing, companion protocol).
RESERVED_TOOL_NAME_PREFIXES: tuple[str, ...] = (SUBAGENT_PREFIX, COMPANION_PREFIX)

Execution = Literal["server", "client", "subagent", "companion"]
ToolFunction = Callable[[Any], Awaitable[Any] | Any]
"""A server tool body, sync or async (docs/server-tools.md).

It receives one argument, an instance of the tool's input model validated from the model's
arguments, and returns a pydantic model or a JSON value (what the model reads; the output model
is not checked against it). An exception it raises becomes a failed tool result
(``tool_execution_failed``, ``"<Type>: <message>"``) that the model reads; it is not retried. It
runs as a recorded DBOS step: once its result is recorded, a recovered turn never runs it
again, but a crash while it runs runs it again, so an external side effect needs an
idempotency key. A sync function runs on the event loop: keep blocking work out of it."""


CALL_KEY: ContextVar[str | None] = ContextVar("helix_dbos_call_key", default=None)
"""The running server-tool call's key, set by the runtime around the call (``call_key``)."""


def call_key() -> str | None:
    """The key of the server-tool call running now: ``"<workflow id>:<step id>"``, the same
    when a recovered turn runs the call again; ``None`` outside a server tool. Give it to an
    external system as its idempotency key (docs/server-tools.md)."""
    return CALL_KEY.get()


CALL_ANSWERS: ContextVar[dict[str, Any] | None] = ContextVar("helix_dbos_answers", default=None)
"""What a human answered to the questions the running call asked (``tool_answers``)."""


def tool_answers() -> dict[str, Any] | None:
    """In a server tool called again after it raised ``ToolAsks`` and the turn parked:
    ``{"responses": {key: response}, "state": ...}``, the answers and the state it asked
    with; ``None`` in a first call."""
    return CALL_ANSWERS.get()


class ToolAsks(Exception):
    """Raised by a server tool that needs a person's input first (an MCP tool answering
    ``input_required``): the turn parks on the call like a client call, the questions
    (``requests``: forms by key) in its pending entry; the answer calls the tool again, once,
    with ``tool_answers()``."""

    def __init__(self, requests: dict[str, Any], state: str | None = None) -> None:
        super().__init__(requests, state)
        self.requests = requests
        self.state = state


class ToolFailure(Exception):
    """Raised by a server tool to fail with a code of its own: the model reads ``message``
    with ``errorCode`` ``code`` (any other exception reads ``tool_execution_failed``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Tool:
    """A tool the model may call. Build it with ``define_tool`` (or ``subagent_tool``)."""

    name: str
    description: str
    input_model: type[BaseModel]
    output_model: type[BaseModel] | None
    execution: Execution
    function: ToolFunction | None = None
    client_tool_timeout: float | None = None
    """Seconds a client (or approval) call may wait; falls back to the agent's, then 5 minutes."""
    finish_with: bool = False
    """Calling this tool ends the turn; its output is the turn's result."""
    require_approval: bool = False
    """A server tool that runs only after a human approves the exact arguments."""
    subagent: str | None = None
    """For a sub-agent tool: the child agent's name."""
    on_timeout: dict[str, Any] | None = field(default=None, compare=False)
    """What a lapsed deadline means (``core/expiry.py``), as recorded on the pending entry:
    ``{"action": "deny" | "approve"}`` or ``{"action": "result", "result": ...}``; ``None``
    is the default, ``client_tool_timeout``."""
    remind_before: float | None = None
    """Seconds before the deadline at which ``client_tool.deadline_near`` is emitted."""
    approval_policy: dict[str, Any] | None = field(default=None, compare=False)
    """Who may decide, and how many must (``core/approval_policy.py``), as recorded on the
    pending entry; ``None``: one approver, anyone."""

    @property
    def suspends(self) -> bool:
        """Whether a call parks the turn (client tools and approval gates)."""
        return self.execution == "client" or self.require_approval

    def schema(self) -> ToolSchema:
        """The tool as the model sees it."""
        return ToolSchema(
            name=self.name,
            description=self.description,
            input_schema=self.input_model.model_json_schema(),
        )


@runtime_checkable
class Toolset(Protocol):
    """Tools an agent finds at run time (an MCP server's, ``helix_dbos.mcp``), declared in
    ``define_agent(tools=[...])`` next to its own. Each tool's name starts with
    ``<name>__``, so two toolsets cannot clash."""

    @property
    def name(self) -> str:
        """The toolset's namespace: its tools are named ``<name>__<tool>``."""
        ...

    def tools(self) -> tuple[Tool, ...]:
        """The tools as last listed (none before the first ``refresh``)."""
        ...

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name`` (namespaced), also when a recovered turn calls it before
        this process listed it; ``None`` when the name is not this toolset's."""
        ...

    async def refresh(self) -> None:
        """List the tools again if the listing is stale; never raises (a failed listing keeps
        the last one)."""
        ...

    async def aclose(self) -> None:
        """Close what the toolset holds open; a later ``refresh`` or call opens it again."""
        ...


def define_tool(
    name: str,
    description: str,
    input_model: type[BaseModel],
    output_model: type[BaseModel] | None = None,
    *,
    execute: Literal["client"] | ToolFunction,
    client_tool_timeout: float | None = None,
    finish_with: bool = False,
    require_approval: bool = False,
    on_timeout: OnTimeout | None = None,
    remind_before: float | None = None,
    approval_policy: ApprovalPolicy | None = None,
) -> Tool:
    """Declare a tool.

    Args:
        name: the name the model calls; must not start with a reserved prefix.
        description: what the tool does, for the model.
        input_model: pydantic model of the arguments.
        output_model: pydantic model of the result; submitted client results are validated
            against it (a server function's return value is not).
        execute: ``"client"`` for a tool the client runs, or the server function
            (``ToolFunction``: it gets the validated input model, returns a pydantic model or
            JSON).
        client_tool_timeout: seconds a client or approval call may wait.
        finish_with: the call ends the turn with its output.
        require_approval: a server tool that waits for a human's approval first.
        on_timeout: what a lapsed deadline means (docs/approvals.md): ``"error"`` (the
            default: ``client_tool_timeout``); for an approval ``"deny"`` (a denial whose
            reason says it expired) or ``"approve"``; for a client tool a
            ``DefaultResult(value)``, validated against ``output_model`` here.
        remind_before: seconds before the deadline at which one ``client_tool.deadline_near``
            event is emitted (log, stream and the ``on_deadline_near`` hooks).
        approval_policy: for an approval gate, who may decide and how many must
            (``ApprovalPolicy``: four eyes, a quorum, roles, an escalation; docs/approvals.md).

    Raises:
        ToolDefinitionError: reserved name, client + finish_with, client + approval, a bad
            timeout, an ``on_timeout`` the tool cannot have, a bad ``remind_before`` or
            ``approval_policy``.
    """
    _check_name(name)
    is_client = _check_execution(
        name, execute, finish_with=finish_with, require_approval=require_approval
    )
    if client_tool_timeout is not None and not (client_tool_timeout > 0):
        raise ToolDefinitionError(f"Tool {name!r}: client_tool_timeout must be > 0 seconds")
    policy = check_on_timeout(
        name,
        on_timeout,
        is_client=is_client,
        require_approval=require_approval,
        output_model=output_model,
    )
    remind = check_remind(
        name, remind_before, client_tool_timeout, suspends=is_client or require_approval
    )
    return Tool(
        name=name,
        description=description,
        input_model=input_model,
        output_model=output_model,
        execution="client" if is_client else "server",
        function=None if is_client else execute,  # type: ignore[arg-type]
        client_tool_timeout=client_tool_timeout,
        finish_with=finish_with,
        require_approval=require_approval,
        on_timeout=policy,
        remind_before=remind,
        approval_policy=check_policy(
            name, approval_policy, require_approval=require_approval, timeout=client_tool_timeout
        ),
    )


def _check_name(name: str) -> None:
    """Refuse an empty tool name or one with a reserved prefix (``ToolDefinitionError``)."""
    if not name or not isinstance(name, str):
        raise ToolDefinitionError("A tool needs a non-empty name")
    for prefix in RESERVED_TOOL_NAME_PREFIXES:
        if name.startswith(prefix):
            raise ToolDefinitionError(
                f"Tool name {name!r} starts with the reserved prefix {prefix!r}",
                toolName=name,
            )


def _check_execution(
    name: str,
    execute: Literal["client"] | ToolFunction,
    *,
    finish_with: bool,
    require_approval: bool,
) -> bool:
    """Whether the tool ``name`` runs on the client (``execute == "client"``) rather than as
    a server function.

    Raises:
        ToolDefinitionError: a client tool that is ``finish_with`` or ``require_approval``,
            or an ``execute`` that is neither ``"client"`` nor a function.
    """
    is_client = execute == "client"
    if is_client and finish_with:
        raise ToolDefinitionError(
            f"Tool {name!r}: a client tool cannot be finish_with", toolName=name
        )
    if is_client and require_approval:
        raise ToolDefinitionError(
            f"Tool {name!r}: require_approval gates a server tool; a client tool already "
            "waits for the client",
            toolName=name,
        )
    if not is_client and not callable(execute):
        raise ToolDefinitionError(f"Tool {name!r}: execute must be 'client' or a function")
    return is_client
