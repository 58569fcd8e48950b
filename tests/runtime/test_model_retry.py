"""The model step's retries in layout 2 (the turn's own code, not a DBOS step): a retryable
provider error is retried with backoff and logged, a non-retryable one fails the turn at once,
and a turn that keeps failing fails typed with the last error."""

from __future__ import annotations

from typing import Any

import pytest

from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.errors import ProviderError
from helix_dbos.llm.scripted import ScriptedLLM, reply
from helix_dbos.runtime._turn import steps as model_step
from helix_dbos.testing import capture_log_events
from tests.runtime.agents import editor_agent
from tests.runtime.conftest import MakeRuntime


def _flaky(failures: int, retryable: bool) -> ScriptedLLM:
    """A model that fails ``failures`` times, then answers."""
    seen = {"n": 0}

    def script(request: LLMRequest) -> LLMResponse:
        seen["n"] += 1
        if seen["n"] <= failures:
            raise ProviderError(
                "the provider is overloaded", code="provider_overloaded", retryable=retryable
            )
        return reply("done")

    return ScriptedLLM(script)


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_step, "MODEL_RETRY_INTERVAL_SECONDS", 0.01)


async def test_a_retryable_provider_error_is_retried_and_logged(
    make_runtime: MakeRuntime,
) -> None:
    llm = _flaky(2, retryable=True)
    rt = await make_runtime([editor_agent(llm=llm)])
    with capture_log_events() as logged:
        handle = await rt.start("editor", "hello")
        view = await rt.wait(handle.session_id)
    assert view["status"] == "completed"
    assert llm.calls == 3
    retries: list[dict[str, Any]] = [e for e in logged if e["event"] == "turn.model_retry"]
    assert [e["attempt"] for e in retries] == [1, 2]
    assert [e["delaySeconds"] for e in retries] == [0.01, 0.02]
    assert {e["errorCode"] for e in retries} == {"provider_overloaded"}
    history = await rt.messages(handle.session_id)
    assert [m.role for m in history] == ["user", "assistant"]  # one answer committed


async def test_a_non_retryable_provider_error_fails_the_turn_at_once(
    make_runtime: MakeRuntime,
) -> None:
    llm = _flaky(1, retryable=False)
    rt = await make_runtime([editor_agent(llm=llm)])
    handle = await rt.start("editor", "hello")
    view = await rt.wait(handle.session_id)
    assert view["status"] == "failed"
    assert view["error"]["code"] == "provider_overloaded"
    assert llm.calls == 1


async def test_a_provider_that_keeps_failing_fails_typed_after_the_last_attempt(
    make_runtime: MakeRuntime,
) -> None:
    llm = _flaky(10, retryable=True)
    rt = await make_runtime([editor_agent(llm=llm)])
    handle = await rt.start("editor", "hello")
    view = await rt.wait(handle.session_id)
    assert view["status"] == "failed"
    assert view["error"]["code"] == "provider_overloaded"
    assert view["error"]["retryable"] is True
    assert llm.calls == model_step.MODEL_ATTEMPTS
