"""helix-dbos: a Postgres-native durable agent runtime on DBOS Transact.

The public API: what an application imports comes from here (``helix_dbos.core`` defines the
definitions and data, and every name of its ``__all__`` is here too). Definitions and errors
import eagerly (pure Python and pydantic); the runtime,
the HTTP layer and settings import on first use, so ``import helix_dbos.core`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .core import (
    COMPANION_NOT_DELIVERED_REASONS,
    DEFAULT_CLIENT_TOOL_TIMEOUT,
    DEFAULT_TOMBSTONE_RETENTION,
    LLM,
    RESERVED_TOOL_NAME_PREFIXES,
    Agent,
    AgentRegistry,
    ApprovalPolicy,
    Companion,
    CompanionDeliveryOutcome,
    Continuation,
    Decider,
    DefaultResult,
    LLMRequest,
    LLMResponse,
    Message,
    PendingCall,
    SessionState,
    SubmitAnswer,
    Tombstone,
    Tool,
    ToolAsks,
    ToolCall,
    ToolFailure,
    ToolSchema,
    Toolset,
    Usage,
    as_companion,
    call_key,
    define_agent,
    define_tool,
    subagent_tool,
    tool_answers,
)
from .core.humanize import humanize_client_tool_error, set_client_tool_error_humanizer
from .core.llm import TextSink
from .errors import ErrorCode, HelixError, is_client_tool_error_code, is_known_error_code

if TYPE_CHECKING:
    from .config import HelixSettings
    from .http import create_app, create_router
    from .runtime import AgentRuntime, TurnHandle

_LAZY = {
    "AgentRuntime": ".runtime",
    "TurnHandle": ".runtime",
    "HelixSettings": ".config",
    "create_router": ".http",
    "create_app": ".http",
}

__all__ = [
    "Agent",
    "AgentRegistry",
    "AgentRuntime",
    "ApprovalPolicy",
    "COMPANION_NOT_DELIVERED_REASONS",
    "Companion",
    "CompanionDeliveryOutcome",
    "Continuation",
    "DEFAULT_CLIENT_TOOL_TIMEOUT",
    "DEFAULT_TOMBSTONE_RETENTION",
    "Decider",
    "DefaultResult",
    "ErrorCode",
    "HelixError",
    "HelixSettings",
    "LLM",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "PendingCall",
    "RESERVED_TOOL_NAME_PREFIXES",
    "SessionState",
    "SubmitAnswer",
    "TextSink",
    "Tombstone",
    "Tool",
    "ToolAsks",
    "ToolCall",
    "ToolFailure",
    "ToolSchema",
    "Toolset",
    "TurnHandle",
    "Usage",
    "__version__",
    "as_companion",
    "call_key",
    "create_app",
    "create_router",
    "define_agent",
    "define_tool",
    "humanize_client_tool_error",
    "is_client_tool_error_code",
    "is_known_error_code",
    "set_client_tool_error_humanizer",
    "subagent_tool",
    "tool_answers",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'helix_dbos' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(module, __name__), name)
