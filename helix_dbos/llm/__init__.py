"""Model adapters: the scripted model (always available) and real providers (optional extras)."""

from .scripted import ScriptedLLM, call, reply

__all__ = ["ScriptedLLM", "call", "reply"]
