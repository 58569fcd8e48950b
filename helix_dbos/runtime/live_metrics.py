"""A scrape of a runtime's live metrics: the database's pending figures, then the text.

The counters are recorded as things happen (``observability.approval_metrics``); the pending
gauges are read here, once per scrape, with one statement (``store.pending_figures``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.agents import DEFAULT_CLIENT_TOOL_TIMEOUT, AgentRegistry
from ..core.clock import now_ms
from ..store import read_pending_figures

if TYPE_CHECKING:
    from ._facade.runtime import AgentRuntime

__all__ = ["scrape"]


def _suspending_tools(registry: AgentRegistry) -> tuple[dict[str, str], float]:
    """The tools of the agents that park a turn, by name (``approval`` or ``client``), and
    the longest deadline of a client call among them (at least the default's)."""
    tools: dict[str, str] = {}
    longest = DEFAULT_CLIENT_TOOL_TIMEOUT
    for agent in registry:
        for tool in agent.tools:
            if tool.execution == "client":
                tools[tool.name] = "client"
                longest = max(longest, agent.deadline_seconds(tool))
            elif tool.require_approval:
                tools[tool.name] = "approval"
    return tools, longest


async def scrape(runtime: AgentRuntime) -> bytes:
    """The runtime's metrics in Prometheus's text format, its pending gauges read now.

    Raises:
        RuntimeError: the runtime is not launched.
        StoreUnavailableError: the database is unreachable (past the store's patience).
    """
    tools, longest = _suspending_tools(runtime.registry)
    figures = await read_pending_figures(runtime.store, client_window_ms=int(longest * 1000))
    # No await from here on: a concurrent scrape never reads gauges half set.
    runtime.metrics.set_pending(figures, now_ms(), tools)
    return runtime.metrics.exposition()
