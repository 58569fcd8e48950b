"""Usage rows for ``__agents_usage``: client-tool waits, outcome counters and token usage.

Rows are written inside the step that observes them, each with a ``dedupe_key``, so a replayed
step never counts twice.
"""

from __future__ import annotations

from typing import Any

from ..core.llm import Usage

__all__ = [
    "CLIENT_TOOL_ABORT",
    "CLIENT_TOOL_RUNTIME_RESTARTED",
    "CLIENT_TOOL_TIMEOUT",
    "CLIENT_TOOL_WAIT_MS",
    "counter_row",
    "token_row",
    "wait_row",
]

CLIENT_TOOL_WAIT_MS = "client_tool_wait_ms"
CLIENT_TOOL_TIMEOUT = "client_tool_timeout"
CLIENT_TOOL_ABORT = "client_tool_abort"
CLIENT_TOOL_RUNTIME_RESTARTED = "client_tool_runtime_restarted"


def wait_row(
    *, session_id: str, run_id: str, tool_call_id: str, tool_name: str, wait_ms: int, at_ms: int
) -> dict[str, Any]:
    """The wall-clock wait of one resolved client call (answered, timed out or aborted)."""
    return {
        "kind": "custom",
        "source_type": CLIENT_TOOL_WAIT_MS,
        "source_name": tool_name,
        "data": {"value": max(0, wait_ms), "toolCallId": tool_call_id},
        "session_id": session_id,
        "run_id": run_id,
        "timestamp": at_ms,
        "dedupe_key": f"{run_id}:{tool_call_id}:{CLIENT_TOOL_WAIT_MS}",
    }


def counter_row(
    source_type: str, *, session_id: str, run_id: str, tool_call_id: str, tool_name: str, at_ms: int
) -> dict[str, Any]:
    """A one-per-occurrence counter (timeout, abort, runtime restarted)."""
    return {
        "kind": "custom",
        "source_type": source_type,
        "source_name": tool_name,
        "data": {"value": 1, "toolCallId": tool_call_id},
        "session_id": session_id,
        "run_id": run_id,
        "timestamp": at_ms,
        "dedupe_key": f"{run_id}:{tool_call_id}:{source_type}",
    }


def token_row(
    usage: Usage, *, session_id: str, run_id: str, step: int, llm_name: str, at_ms: int
) -> dict[str, Any]:
    """Token usage of one model call."""
    return {
        "kind": "tokens",
        "source_type": "llm_tokens",
        "source_name": llm_name,
        "data": {
            "value": usage.input_tokens + usage.output_tokens,
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
            "cachedTokens": usage.cached_tokens,
        },
        "session_id": session_id,
        "run_id": run_id,
        "timestamp": at_ms,
        "dedupe_key": f"{run_id}:{step}:llm_tokens",
    }
