"""Declaring agents and finding them by name."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from ..errors import AgentNotFoundError, ToolDefinitionError
from .companions import (
    DEFAULT_COMPANION_DELIVERY_TIMEOUT,
    Companion,
    as_companion,
    check_companions,
    companion_tools,
)
from .llm import LLM, ToolSchema
from .tools import SUBAGENT_PREFIX, Tool, Toolset

__all__ = [
    "DEFAULT_CLIENT_TOOL_TIMEOUT",
    "DEFAULT_IDLE_TTL",
    "DEFAULT_TOMBSTONE_RETENTION",
    "Agent",
    "AgentRegistry",
    "SubAgentInput",
    "define_agent",
    "subagent_tool",
]

#: Seconds a client or approval call waits when neither the tool nor the agent says (5 minutes).
DEFAULT_CLIENT_TOOL_TIMEOUT = 300.0
#: Seconds a completed call's tombstone keeps a duplicate submit answered ``already_completed``.
DEFAULT_TOMBSTONE_RETENTION = 24 * 3600.0
#: Seconds a persistent agent's workflow waits idle for the next message before it hibernates.
DEFAULT_IDLE_TTL = 300.0


class SubAgentInput(BaseModel):
    """The input of every sub-agent tool: the message the child agent starts from."""

    message: str = Field(description="What the sub-agent should do.")


@dataclass(frozen=True)
class Agent:
    """An agent: a model, instructions and tools. Build it with ``define_agent``."""

    name: str
    llm: LLM
    instructions: str
    tools: tuple[Tool, ...] = ()
    max_steps: int = 20
    client_tool_timeout: float | None = None
    completed_tombstone_retention: float = DEFAULT_TOMBSTONE_RETENTION
    subagents: tuple[Agent, ...] = field(default=())
    persistent: bool = False
    """A root session's turns run in ONE long-lived workflow fed by its inbox (docs/lifecycle.md)."""
    idle_ttl: float = DEFAULT_IDLE_TTL
    """Persistent only: seconds the workflow waits idle between turns before it hibernates."""
    hibernate_after: float | None = None
    """Seconds a turn parked on a batch stays a live workflow (its hot window) before it
    hibernates; ``None``: the runtime's ``hibernate_after_seconds``; ``math.inf``: never."""
    companions: tuple[Companion, ...] = field(default=())
    """Persistent agents this one talks to (docs/companions.md)."""
    companion_delivery_timeout: float = DEFAULT_COMPANION_DELIVERY_TIMEOUT
    """Seconds a send waits for a companion's run to start (``child_start_unconfirmed``)."""
    toolsets: tuple[Toolset, ...] = field(default=())
    """Tools found at run time (an MCP server's), named ``<toolset>__<tool>``."""

    def companion(self, name: str) -> Companion | None:
        """The companion called ``name``, if this agent declares one."""
        return next((c for c in self.companions if c.name == name), None)

    @functools.cached_property
    def _own_schemas(self) -> tuple[ToolSchema, ...]:
        """The agent's own tools as the model sees them, built once (JSON schemas are costly)."""
        return tuple(tool.schema() for tool in self.tools)

    @property
    def tool_schemas(self) -> tuple[ToolSchema, ...]:
        """The tools as the model sees them: the agent's own, then its toolsets' as listed."""
        if not self.toolsets:
            return self._own_schemas
        found = tuple(tool.schema() for toolset in self.toolsets for tool in toolset.tools())
        return self._own_schemas + found

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, if the agent has it (its own, or a toolset's)."""
        for tool in self.tools:
            if tool.name == name:
                return tool
        for toolset in self.toolsets:
            found = toolset.tool(name)
            if found is not None:
                return found
        return None

    async def refresh_toolsets(self) -> None:
        """List each toolset's tools again where its listing is stale (before a model call)."""
        for toolset in self.toolsets:
            await toolset.refresh()

    async def close_toolsets(self) -> None:
        """Close what the toolsets hold open (connections, subprocesses): a runtime's shutdown."""
        for toolset in self.toolsets:
            await toolset.aclose()

    def deadline_seconds(self, tool: Tool) -> float:
        """The client deadline of a call: tool, then agent, then 5 minutes."""
        if tool.client_tool_timeout is not None:
            return tool.client_tool_timeout
        if self.client_tool_timeout is not None:
            return self.client_tool_timeout
        return DEFAULT_CLIENT_TOOL_TIMEOUT


def subagent_tool(agent: Agent, description: str | None = None) -> Tool:
    """The framework-built tool that runs ``agent`` as a child of the calling agent."""
    return Tool(
        name=f"{SUBAGENT_PREFIX}{agent.name}",
        description=description or f"Delegate a task to the {agent.name} agent.",
        input_model=SubAgentInput,
        output_model=None,
        execution="subagent",
        subagent=agent.name,
    )


def define_agent(
    name: str,
    *,
    llm: LLM,
    instructions: str = "",
    tools: Iterable[Tool | Toolset] = (),
    subagents: Iterable[Agent] = (),
    max_steps: int = 20,
    client_tool_timeout: float | None = None,
    completed_tombstone_retention: float = DEFAULT_TOMBSTONE_RETENTION,
    persistent: bool = False,
    idle_ttl: float | None = None,
    hibernate_after: float | Literal["never"] | None = None,
    companions: Iterable[Agent | Companion] = (),
    companion_delivery_timeout: float | None = None,
) -> Agent:
    """Declare an agent.

    Args:
        name: the agent type, used to find it in the registry (and stored on sessions).
        llm: the model adapter.
        instructions: the system prompt.
        tools: the tools the model may call, and toolsets (an MCP server's: ``helix_dbos.mcp``).
        subagents: agents this one may delegate to; each becomes a ``subagent__<name>`` tool.
        max_steps: model calls allowed per turn.
        client_tool_timeout: the agent's client-call deadline in seconds.
        completed_tombstone_retention: seconds a completed call still answers duplicates with
            ``already_completed``; finite and >= 0, 0 turns retention off.
        persistent: run each root session as ONE long-lived workflow that takes its turns
            from an inbox, instead of one workflow per turn (see docs/lifecycle.md).
        idle_ttl: persistent only: seconds the workflow waits idle for the next message before
            it hibernates (ends; the next message starts a new one). Default 300, finite, > 0.
        hibernate_after: seconds a turn parked on client calls or approvals stays a live
            workflow before it hibernates (its workflow ends; a submit or the batch's deadline
            continues it, see docs/client-tools.md). ``0`` hibernates at once, ``"never"``
            never; ``None`` (the default) takes the runtime's ``hibernate_after_seconds``
            (``HELIX_HIBERNATE_AFTER_SECONDS``, 60 by default).
        companions: persistent agents this one talks to (``companion__`` tools, see
            docs/companions.md); ``companion_delivery_timeout``: seconds a send waits for a
            companion's run to start (default 60) before ``child_start_unconfirmed``.

    Raises:
        ToolDefinitionError: a bad name, step count, deadline, retention or idle TTL (or an
            idle TTL without ``persistent``), duplicate tools, a bad companion.
    """
    if not name or "::" in name:
        raise ToolDefinitionError("An agent needs a non-empty name without '::'")
    if max_steps < 1:
        raise ToolDefinitionError(f"Agent {name!r}: max_steps must be >= 1")
    if client_tool_timeout is not None and not (client_tool_timeout > 0):
        raise ToolDefinitionError(f"Agent {name!r}: client_tool_timeout must be > 0 seconds")
    retention = _check_retention(name, completed_tombstone_retention)
    _check_idle_ttl(name, persistent, idle_ttl)
    hot_window = _hot_window(name, hibernate_after)
    (own, toolsets), children = _split_toolsets(name, tools), tuple(subagents)
    all_tools = own + tuple(subagent_tool(child) for child in children)
    names = [t.name for t in all_tools]
    if len(names) != len(set(names)):
        raise ToolDefinitionError(f"Agent {name!r}: two tools share a name")
    mates, delivery = _companions(name, companions, names, companion_delivery_timeout)
    all_tools += companion_tools(mates)
    return Agent(
        name=name,
        llm=llm,
        instructions=instructions,
        tools=all_tools,
        max_steps=max_steps,
        client_tool_timeout=client_tool_timeout,
        completed_tombstone_retention=retention,
        subagents=children,
        persistent=bool(persistent),
        idle_ttl=float(idle_ttl) if idle_ttl is not None else DEFAULT_IDLE_TTL,
        hibernate_after=hot_window,
        companions=mates,
        companion_delivery_timeout=delivery,
        toolsets=toolsets,
    )


def _check_retention(name: str, retention: float) -> float:
    """``define_agent``'s ``completed_tombstone_retention``: a finite number >= 0."""
    if not isinstance(retention, int | float) or not math.isfinite(retention) or retention < 0:
        raise ToolDefinitionError(
            f"Agent {name!r}: completed_tombstone_retention must be a finite number >= 0"
        )
    return float(retention)


def _split_toolsets(
    name: str, given: Iterable[Tool | Toolset]
) -> tuple[tuple[Tool, ...], tuple[Toolset, ...]]:
    """``define_agent``'s tools and toolsets apart; two toolsets of one name, or a tool of
    the agent's own named in a toolset's namespace, are refused (they could clash)."""
    own: list[Tool] = []
    toolsets: list[Toolset] = []
    for item in given:
        if isinstance(item, Tool):
            own.append(item)
        elif isinstance(item, Toolset):
            toolsets.append(item)
        else:
            raise ToolDefinitionError(f"Agent {name!r}: {item!r} is neither a tool nor a toolset")
    spaces = [t.name for t in toolsets]
    if len(spaces) != len(set(spaces)):
        raise ToolDefinitionError(f"Agent {name!r}: two toolsets share a name")
    for tool in own:
        if any(tool.name.startswith(f"{space}__") for space in spaces):
            raise ToolDefinitionError(
                f"Agent {name!r}: the tool {tool.name!r} is in a toolset's namespace",
                toolName=tool.name,
            )
    return tuple(own), tuple(toolsets)


def _check_idle_ttl(name: str, persistent: bool, idle_ttl: float | None) -> None:
    """``define_agent``'s ``idle_ttl``: only for a persistent agent, finite and > 0."""
    if idle_ttl is None:
        return
    if not persistent:
        raise ToolDefinitionError(f"Agent {name!r}: idle_ttl needs persistent=True")
    if not isinstance(idle_ttl, int | float) or not math.isfinite(idle_ttl) or idle_ttl <= 0:
        raise ToolDefinitionError(f"Agent {name!r}: idle_ttl must be a finite number > 0")


def _companions(
    name: str, given: Iterable[Agent | Companion], tool_names: list[str], timeout: float | None
) -> tuple[tuple[Companion, ...], float]:
    """``define_agent``'s companions, checked, and their delivery timeout."""
    mates = tuple(as_companion(c) for c in given)
    check_companions(name, mates, tool_names)
    if timeout is None:
        return mates, DEFAULT_COMPANION_DELIVERY_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ToolDefinitionError(f"Agent {name!r}: companion_delivery_timeout must be a number")
    if not math.isfinite(timeout) or timeout <= 0:
        raise ToolDefinitionError(f"Agent {name!r}: companion_delivery_timeout must be > 0")
    return mates, float(timeout)


def _hot_window(name: str, hibernate_after: float | str | None) -> float | None:
    """``define_agent``'s ``hibernate_after`` as the agent stores it (``math.inf``: never)."""
    if hibernate_after is None:
        return None
    if hibernate_after == "never":
        return math.inf
    if (
        isinstance(hibernate_after, bool)
        or not isinstance(hibernate_after, int | float)
        or not math.isfinite(hibernate_after)
        or hibernate_after < 0
    ):
        raise ToolDefinitionError(
            f"Agent {name!r}: hibernate_after must be a finite number of seconds >= 0 or "
            f"'never' (got {hibernate_after!r})"
        )
    return float(hibernate_after)


class AgentRegistry:
    """Agents by name. Only names cross a durable boundary; objects are looked up here."""

    def __init__(self, agents: Iterable[Agent] = ()) -> None:
        self._agents: dict[str, Agent] = {}
        for agent in agents:
            self.register(agent)

    def register(self, agent: Agent) -> None:
        """Add an agent and, recursively, its sub-agents."""
        existing = self._agents.get(agent.name)
        if existing is not None and existing is not agent:
            raise ToolDefinitionError(f"Two different agents are named {agent.name!r}")
        self._agents[agent.name] = agent
        for child in (*agent.subagents, *(c.agent for c in agent.companions)):
            self.register(child)

    def get(self, name: str) -> Agent:
        """The agent called ``name``.

        Raises:
            AgentNotFoundError: no agent has that name.
        """
        agent = self._agents.get(name)
        if agent is None:
            raise AgentNotFoundError(f"No agent is registered as {name!r}", agentType=name)
        return agent

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def __iter__(self) -> Iterator[Agent]:
        return iter(self._agents.values())
