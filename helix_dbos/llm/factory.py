"""Choosing a model adapter from a short spec such as ``openai:gpt-4o-mini``.

The spec comes from the argument or from ``HELIX_LLM``, so the same application runs against
OpenAI, Anthropic, a local OpenAI-compatible server or the scripted echo model by changing
the environment only.
"""

from __future__ import annotations

import os

from ..core.llm import LLM, LLMRequest, LLMResponse
from ..errors import ConfigError
from .scripted import ScriptedLLM, reply

__all__ = ["SPEC_FORMS", "echo_script", "infer_llm"]

#: The accepted spec forms, for error messages and docs.
SPEC_FORMS = "'openai:<model>', 'anthropic:<model>' or 'scripted'"


def echo_script(request: LLMRequest) -> LLMResponse:
    """Answer ``You said: <the last user message>`` (the ``scripted`` spec's model)."""
    last = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    return reply(f"You said: {last}")


def infer_llm(spec: str | None = None, *, default: str | None = None) -> LLM:
    """Build the model adapter a spec names.

    Forms: ``openai:<model>`` (``OpenAICompatibleLLM``; key from ``OPENAI_API_KEY``, endpoint
    from ``OPENAI_BASE_URL``), ``anthropic:<model>`` (``AnthropicLLM``; ``ANTHROPIC_API_KEY``,
    ``ANTHROPIC_BASE_URL``) and ``scripted`` (a ``ScriptedLLM`` that echoes the last user
    message). ``HELIX_LLM_BASE_URL``, when set, overrides the provider's endpoint variable.

    Args:
        spec: the spec; None reads ``HELIX_LLM``.
        default: the spec to use when neither ``spec`` nor ``HELIX_LLM`` gives one.

    Returns:
        The adapter.

    Raises:
        ConfigError: no spec, an unknown provider, a missing model name, or a provider SDK or
            key that is missing.
    """
    raw = spec if spec is not None else os.environ.get("HELIX_LLM") or default
    if raw is None or not raw.strip():
        raise ConfigError(f"No model configured: set HELIX_LLM to {SPEC_FORMS}")
    provider, model = _parse_spec(raw)
    if provider == "scripted":
        return ScriptedLLM(echo_script)
    return _provider_llm(provider, model)


def _parse_spec(raw: str) -> tuple[str, str]:
    """The ``(provider, model)`` a non-blank spec names: ``("scripted", "")`` for the scripted
    model, else ``openai`` or ``anthropic`` and a model name.

    Raises:
        ConfigError: an unknown provider, or a provider without a model name.
    """
    provider, sep, model = raw.strip().partition(":")
    provider = provider.strip().lower()
    model = model.strip()
    if provider == "scripted" and not model:
        return provider, model
    if provider not in ("openai", "anthropic"):
        raise ConfigError(f"Unknown model spec {raw!r}: expected {SPEC_FORMS}")
    if not sep or not model:
        raise ConfigError(f"Model spec {raw!r} names no model: expected '{provider}:<model>'")
    return provider, model


def _provider_llm(provider: str, model: str) -> LLM:
    """The adapter of ``model`` at ``provider`` (``openai`` or ``anthropic``), its key and
    endpoint from the environment (``HELIX_LLM_BASE_URL`` first for the endpoint)."""
    base_url = os.environ.get("HELIX_LLM_BASE_URL") or None
    if provider == "openai":
        from .openai_compat import OpenAICompatibleLLM

        return OpenAICompatibleLLM(
            model,
            api_key=os.environ.get("OPENAI_API_KEY") or None,
            base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
        )
    from .anthropic import AnthropicLLM

    return AnthropicLLM(
        model,
        api_key=os.environ.get("ANTHROPIC_API_KEY") or None,
        base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL") or None,
    )
