"""Pure data and definitions: messages, tools, agents, sessions. Imports stdlib and pydantic only."""

from .agents import (
    DEFAULT_CLIENT_TOOL_TIMEOUT,
    DEFAULT_TOMBSTONE_RETENTION,
    Agent,
    AgentRegistry,
    define_agent,
    subagent_tool,
)
from .approval_policy import ApprovalPolicy, Decider
from .companions import (
    COMPANION_NOT_DELIVERED_REASONS,
    Companion,
    CompanionDeliveryOutcome,
    as_companion,
)
from .expiry import DefaultResult
from .llm import LLM, LLMRequest, LLMResponse, ToolSchema, Usage
from .messages import Message, ToolCall
from .session import Continuation, PendingCall, SessionState, SubmitAnswer, Tombstone
from .tools import (
    RESERVED_TOOL_NAME_PREFIXES,
    Tool,
    ToolAsks,
    ToolFailure,
    Toolset,
    call_key,
    define_tool,
    tool_answers,
)

__all__ = [
    "COMPANION_NOT_DELIVERED_REASONS",
    "DEFAULT_CLIENT_TOOL_TIMEOUT",
    "DEFAULT_TOMBSTONE_RETENTION",
    "LLM",
    "RESERVED_TOOL_NAME_PREFIXES",
    "Agent",
    "AgentRegistry",
    "ApprovalPolicy",
    "Companion",
    "CompanionDeliveryOutcome",
    "Continuation",
    "Decider",
    "DefaultResult",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "PendingCall",
    "SessionState",
    "SubmitAnswer",
    "Tombstone",
    "Tool",
    "ToolAsks",
    "ToolCall",
    "ToolFailure",
    "ToolSchema",
    "Toolset",
    "Usage",
    "as_companion",
    "call_key",
    "define_agent",
    "define_tool",
    "subagent_tool",
    "tool_answers",
]
