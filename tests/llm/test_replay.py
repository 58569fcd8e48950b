"""A turn recovered after a crash replays its recorded model call: the provider is not
called again (the fake server counts requests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from helix_dbos.runtime import AgentRuntime
from tests.processes import reaped

from . import replay_worker
from .fake_servers import FakeServer, Recorded, Reply, openai_text, openai_tool_calls


def weather(request: Recorded) -> Reply:
    if request.body["messages"][-1]["role"] == "tool":
        return openai_text("It is sunny in Paris.")
    return openai_tool_calls([("call_r1", "get_weather", ['{"city": "Paris"}'])])


@pytest.mark.slow
async def test_recovered_turn_does_not_call_the_provider_again(pg_url: str) -> None:
    """One request before the SIGKILL, one after the answer: never the first one twice."""
    with FakeServer(weather) as server:
        base_url = f"{server.url}/v1"
        worker = subprocess.Popen(
            [sys.executable, replay_worker.__file__, pg_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "FAKE_BASE_URL": base_url},
        )
        with reaped(worker) as child:
            assert child.stdout is not None
            session_id = child.stdout.readline().strip()
            assert session_id, child.stderr.read() if child.stderr else ""
            assert len(server.requests) == 1
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)

        runtime = AgentRuntime([replay_worker.agent(base_url)], replay_worker.settings(pg_url))
        await runtime.launch()
        try:
            (call,) = await runtime.wait_for_pending(session_id)
            answer = await runtime.submit_tool_result(
                session_id, call["toolCallId"], result={"sky": "sunny"}
            )
            assert answer.status == "accepted"
            view = await runtime.wait(session_id, timeout=30)
            assert view["status"] == "completed"
        finally:
            await runtime.shutdown()
        # The recorded model step replayed from its record: exactly one more request, the one
        # that carries the tool result.
        assert len(server.requests) == 2
        assert server.requests[1].body["messages"][-1]["role"] == "tool"
        history = [m.role for m in await _messages(pg_url, session_id)]
        assert history == ["user", "assistant", "tool", "assistant"]


async def _messages(url: str, session_id: str):  # type: ignore[no-untyped-def]
    from helix_dbos.store.store import SessionStore

    store = SessionStore.from_url(url)
    try:
        return await store.load_messages(session_id)
    finally:
        await store.close()
