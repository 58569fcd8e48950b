"""Humanized text for framework-made tool failures, with an injection point for localization."""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "Humanizer",
    "default_humanizer",
    "humanize_client_tool_error",
    "set_client_tool_error_humanizer",
]

Humanizer = Callable[[str, str], str | None]
"""``(code, tool_name) -> text``; returning ``None`` falls back to the built-in text."""

_TEXTS: dict[str, str] = {
    "client_tool_timeout": (
        "The tool '{tool}' runs in the user's client, and the client did not answer before "
        "the deadline. The call was not completed. You may retry it or continue without it."
    ),
    "client_tool_abandoned": (
        "The user sent a new message instead of completing the tool '{tool}', so the call was "
        "abandoned and not executed. Follow the user's new message."
    ),
    "aborted": "The tool '{tool}' was aborted before it completed.",
    "runtime_restarted": (
        "The runtime restarted while the tool '{tool}' was pending; its result was lost."
    ),
    "disposed": "The tool '{tool}' was disposed before it completed.",
    "validation_failed": "The result of the tool '{tool}' failed validation.",
    "not_executed": (
        "The tool '{tool}' was not executed: the previous turn was stopped before it completed."
    ),
    "approval_denied": "A human denied the call to the tool '{tool}'.",
    "approval_expired": (
        "The call to the tool '{tool}' was denied. Reason: its approval expired before a human "
        "answered, so the tool did not run."
    ),
}

_humanizer: Humanizer | None = None


def default_humanizer(code: str, tool_name: str) -> str:
    """The built-in English text for a framework code; unknown codes pass through."""
    template = _TEXTS.get(code)
    return template.format(tool=tool_name) if template else code


def set_client_tool_error_humanizer(humanizer: Humanizer | None) -> None:
    """Install a deployment's own (or localized) humanizer; ``None`` restores the default."""
    global _humanizer
    _humanizer = humanizer


def humanize_client_tool_error(code: str, tool_name: str) -> str:
    """The text the model reads for a framework-made tool failure."""
    if _humanizer is not None:
        text = _humanizer(code, tool_name)
        if text is not None:
            return text
    return default_humanizer(code, tool_name)
