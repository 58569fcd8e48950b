"""Companions: persistent agents a parent talks to, and the tools the parent's model gets.

A companion is a ``persistent=True`` agent attached to a parent agent (``define_agent(...,
companions=[...])``). The parent's model sends it messages with ``companion__sendMessage``
and goes on without waiting; the send reports a ``CompanionDeliveryOutcome``. The
companion's replies come back to the parent's conversation as notifications
(docs/companions.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict

from pydantic import BaseModel, Field

from ..errors import ToolDefinitionError
from .tools import COMPANION_PREFIX, Tool

if TYPE_CHECKING:
    from .agents import Agent

__all__ = [
    "COMPANION_NOT_DELIVERED_REASONS",
    "COMPANION_TOOL_NAMES",
    "DEFAULT_COMPANION_DELIVERY_TIMEOUT",
    "Companion",
    "CompanionDeliveryOutcome",
    "CompanionNotDeliveredReason",
    "CompanionSendInput",
    "CompanionTarget",
    "as_companion",
    "check_companions",
    "companion_tools",
]

#: Seconds a send waits for the companion's run to start before it answers
#: ``child_start_unconfirmed``.
DEFAULT_COMPANION_DELIVERY_TIMEOUT = 60.0

CompanionNotDeliveredReason = Literal[
    "child_busy",
    "child_start_unconfirmed",
    "child_entry_failed",
    "child_not_running",
    "child_exited",
    "no_resume_config",
]
#: Every reason a send can report ``delivered: false`` with.
COMPANION_NOT_DELIVERED_REASONS: Final[tuple[CompanionNotDeliveredReason, ...]] = (
    "child_busy",
    "child_start_unconfirmed",
    "child_entry_failed",
    "child_not_running",
    "child_exited",
    "no_resume_config",
)


class CompanionDeliveryOutcome(TypedDict, total=False):
    """What ``companion__sendMessage`` answers (a successful tool result either way):
    ``{"delivered": true}``, or ``{"delivered": false, "reason", "errorDetail"?}``."""

    delivered: bool
    reason: CompanionNotDeliveredReason
    errorDetail: dict[str, Any]
    companionSessionId: str
    runId: str


SEND_TOOL = f"{COMPANION_PREFIX}sendMessage"
STATUS_TOOL = f"{COMPANION_PREFIX}status"
END_TOOL = f"{COMPANION_PREFIX}end"
#: The framework-built companion tools, in the order the model sees them.
COMPANION_TOOL_NAMES: Final[tuple[str, ...]] = (SEND_TOOL, STATUS_TOOL, END_TOOL)


class CompanionSendInput(BaseModel):
    """``companion__sendMessage``'s input."""

    companion: str = Field(description="The companion's name.")
    message: str = Field(description="What to tell the companion.")


class CompanionTarget(BaseModel):
    """The input of ``companion__status`` and ``companion__end``: which companion."""

    companion: str = Field(description="The companion's name.")


@dataclass(frozen=True)
class Companion:
    """A companion as its parent declares it: the persistent agent, and how its replies
    reach the parent. Build it with ``as_companion`` (or pass the agent itself)."""

    agent: Agent
    wake_parent: bool = False
    """A reply that reaches a parent between turns starts a parent turn (no user message) to
    read it; ``False``: the parent's model reads it with the parent's next message."""

    @property
    def name(self) -> str:
        """The companion's name: its agent's."""
        return self.agent.name


def as_companion(agent: Agent | Companion, *, wake_parent: bool | None = None) -> Companion:
    """``agent`` as a companion (``wake_parent``: see ``Companion.wake_parent``)."""
    if isinstance(agent, Companion):
        if wake_parent is None:
            return agent
        return Companion(agent.agent, wake_parent=wake_parent)
    return Companion(agent, wake_parent=bool(wake_parent))


def companion_tools(companions: Iterable[Companion]) -> tuple[Tool, ...]:
    """The tools a parent with ``companions`` gets (none without companions)."""
    names = [c.name for c in companions]
    if not names:
        return ()
    listed = ", ".join(repr(n) for n in names)

    def tool(name: str, description: str, model: type[BaseModel]) -> Tool:
        return Tool(
            name=name,
            description=description,
            input_model=model,
            output_model=None,
            execution="companion",
        )

    return (
        tool(
            SEND_TOOL,
            f"Send a message to a companion ({listed}) and go on without waiting; its reply "
            "comes back later as a message. Answers {delivered: true}, or {delivered: false, "
            "reason}: then you may send again.",
            CompanionSendInput,
        ),
        tool(STATUS_TOOL, f"Read a companion's state ({listed}).", CompanionTarget),
        tool(
            END_TOOL,
            f"End a companion ({listed}) for good: later messages to it are not delivered.",
            CompanionTarget,
        ),
    )


def check_companions(
    name: str, companions: tuple[Companion, ...], tool_names: Iterable[str]
) -> None:
    """Refuse, at definition time, companions that are not persistent, a name two of them
    (or a companion and a sub-agent or tool) share, and a cycle (an agent reachable from
    itself through companions and sub-agents, by name).

    Raises:
        ToolDefinitionError: what is wrong, naming the agent.
    """
    seen: set[str] = set()
    taken = set(tool_names)
    for c in companions:
        if not c.agent.persistent:
            raise ToolDefinitionError(
                f"Agent {name!r}: companion {c.name!r} must be persistent (persistent=True)"
            )
        if c.name in seen or c.name == name or f"subagent__{c.name}" in taken:
            raise ToolDefinitionError(f"Agent {name!r}: the name {c.name!r} is taken twice")
        seen.add(c.name)
        if _reaches(c.agent, name, set()):
            raise ToolDefinitionError(
                f"Agent {name!r}: companion {c.name!r} leads back to {name!r} (a cycle)"
            )


def _reaches(agent: Agent, target: str, visited: set[str]) -> bool:
    """Whether ``target`` is ``agent`` or below it (companions and sub-agents, by name)."""
    if agent.name == target:
        return True
    if agent.name in visited:
        return False
    visited.add(agent.name)
    below = [*agent.subagents, *(c.agent for c in agent.companions)]
    return any(_reaches(child, target, visited) for child in below)
