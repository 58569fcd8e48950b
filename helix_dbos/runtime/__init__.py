"""The durable runtime: the only package (with http and cli) that decorates with DBOS."""

from .runtime import AgentRuntime, TurnHandle

__all__ = ["AgentRuntime", "TurnHandle"]
