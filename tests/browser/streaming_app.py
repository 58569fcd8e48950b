"""An agent server whose demo editor streams its replies word by word, slowly.

The demo's scripted model streams each reply as one delta; this one sends a delta per word,
a pause apart, so a browser can watch the text grow. Run it as
``uvicorn tests.browser.streaming_app:app`` with ``HELIX_DATABASE_URL`` set.
"""

from __future__ import annotations

import asyncio

from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse, TextSink
from helix_dbos.demo import EDIT_CONTENT, EDITOR_AGENT, PUBLISH_DOCUMENT, editor_script
from helix_dbos.http.app import create_app
from helix_dbos.runtime import AgentRuntime

#: The pause between two words: longer than the runtime's delta flush and the stream's poll.
WORD_PAUSE_SECONDS = 0.3


class WordByWordLLM:
    """The demo editor's script, its text streamed one word at a time."""

    name = "word-by-word-editor"

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        response = editor_script(request)
        if on_text is not None and response.text:
            words = response.text.split(" ")
            for i, word in enumerate(words):
                await on_text(word if i == 0 else " " + word)
                await asyncio.sleep(WORD_PAUSE_SECONDS)
        return response


editor = define_agent(EDITOR_AGENT, llm=WordByWordLLM(), tools=[EDIT_CONTENT, PUBLISH_DOCUMENT])
app = create_app(AgentRuntime([editor], HelixSettings.from_env()), allow_unauthenticated=True)
