"""ScriptedLLM streams a reply as one delta by default, or word by word with a pause."""

from __future__ import annotations

import time

import pytest

from helix_dbos.core.llm import LLMRequest
from helix_dbos.errors import ConfigError
from helix_dbos.llm.scripted import ScriptedLLM, reply, word_chunks

TEXT = "Applied 2 edits.\nPublished  the document."


def request() -> LLMRequest:
    return LLMRequest(instructions="", messages=[], session_id="s", run_id="r")


class Recorder:
    """An ``on_text`` sink that keeps each delta and when it came."""

    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.times: list[float] = []

    async def __call__(self, delta: str) -> None:
        self.deltas.append(delta)
        self.times.append(time.monotonic())


def test_word_chunks_join_back_to_the_text() -> None:
    assert word_chunks(TEXT) == ["Applied ", "2 ", "edits.\n", "Published  ", "the ", "document."]
    for text in (TEXT, "  lead", "trail  ", "one", "", " "):
        assert "".join(word_chunks(text)) == text


async def test_by_default_the_reply_is_one_delta() -> None:
    sink = Recorder()
    response = await ScriptedLLM(lambda r: reply(TEXT)).complete(request(), sink)
    assert response.text == TEXT and sink.deltas == [TEXT]


async def test_a_pause_streams_the_reply_word_by_word() -> None:
    """Each word is its own delta, at least the pause after the one before."""
    pause = 0.02
    llm = ScriptedLLM(lambda r: reply(TEXT), stream_pause_seconds=pause)
    sink = Recorder()
    response = await llm.complete(request(), sink)
    assert response.text == TEXT
    assert sink.deltas == word_chunks(TEXT)
    gaps = [b - a for a, b in zip(sink.times, sink.times[1:], strict=False)]
    assert min(gaps) >= pause * 0.9, gaps


async def test_no_sink_no_pause() -> None:
    """Without a sink (a caller that does not stream) the answer comes without the pauses."""
    llm = ScriptedLLM(lambda r: reply(TEXT * 20), stream_pause_seconds=1.0)
    began = time.monotonic()
    assert (await llm.complete(request())).text == TEXT * 20
    assert time.monotonic() - began < 1.0


def test_a_negative_pause_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="stream_pause_seconds"):
        ScriptedLLM(lambda r: reply("x"), stream_pause_seconds=-0.1)
