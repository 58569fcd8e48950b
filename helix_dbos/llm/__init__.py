"""Model adapters: the scripted model (always available) and real providers (optional extras).

``OpenAICompatibleLLM`` and ``AnthropicLLM`` import their SDK only when constructed, so this
package imports without the ``openai`` or ``anthropic`` extras installed.
"""

from .anthropic import AnthropicLLM
from .factory import infer_llm
from .openai_compat import OpenAICompatibleLLM
from .scripted import ScriptedLLM, call, reply

__all__ = ["AnthropicLLM", "OpenAICompatibleLLM", "ScriptedLLM", "call", "infer_llm", "reply"]
