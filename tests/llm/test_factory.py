"""infer_llm: building an adapter from a spec or ``HELIX_LLM``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from helix_dbos.core.llm import LLM, LLMRequest
from helix_dbos.core.messages import Message
from helix_dbos.errors import ConfigError
from helix_dbos.llm import AnthropicLLM, OpenAICompatibleLLM, ScriptedLLM, infer_llm

from .fake_servers import FakeServer, anthropic_text, openai_text

ENV = (
    "HELIX_LLM",
    "HELIX_LLM_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


def ask(*texts: str) -> LLMRequest:
    return LLMRequest(instructions="", messages=[Message(role="user", content=t) for t in texts])


async def test_scripted_echoes_the_last_user_message() -> None:
    llm = infer_llm("scripted")
    assert isinstance(llm, ScriptedLLM)
    assert isinstance(llm, LLM)
    response = await llm.complete(ask("first", "second"))
    assert response.text == "You said: second"


async def test_helix_llm_is_read_when_no_spec_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELIX_LLM", "scripted")
    assert isinstance(infer_llm(), ScriptedLLM)


def test_default_applies_only_without_spec_or_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(infer_llm(default="scripted"), ScriptedLLM)
    monkeypatch.setenv("HELIX_LLM", "openai:gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert isinstance(infer_llm(default="scripted"), OpenAICompatibleLLM)


def test_openai_spec_builds_the_openai_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    llm = infer_llm("openai:gpt-4o-mini")
    assert isinstance(llm, OpenAICompatibleLLM)
    assert llm.name == "openai:gpt-4o-mini"
    assert llm.model == "gpt-4o-mini"


def test_model_names_may_contain_colons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    llm = infer_llm(" OpenAI:llama3.1:8b ")
    assert isinstance(llm, OpenAICompatibleLLM)
    assert llm.model == "llama3.1:8b"


def test_anthropic_spec_builds_the_anthropic_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    llm = infer_llm("anthropic:claude-sonnet-4-5")
    assert isinstance(llm, AnthropicLLM)
    assert llm.name == "anthropic:claude-sonnet-4-5"


async def test_openai_key_and_base_url_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, server: FakeServer
) -> None:
    monkeypatch.setenv("HELIX_LLM", "openai:fake-model")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
    server.enqueue(openai_text("hi"))

    response = await infer_llm().complete(ask("hello"))

    assert response.text == "hi"
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"
    assert server.bodies[0]["model"] == "fake-model"


async def test_helix_llm_base_url_overrides_the_provider_variable(
    monkeypatch: pytest.MonkeyPatch, server: FakeServer
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("HELIX_LLM_BASE_URL", server.url)
    server.enqueue(anthropic_text("hi"))

    response = await infer_llm("anthropic:fake-claude").complete(ask("hello"))

    assert response.text == "hi"
    assert server.bodies[0]["model"] == "fake-claude"


@pytest.mark.parametrize(
    "spec", ["", "  ", "gpt-4o", "mistral:large", "openai", "openai:", "anthropic: ", "scripted:x"]
)
def test_bad_specs_are_config_errors(spec: str) -> None:
    with pytest.raises(ConfigError):
        infer_llm(spec)


def test_no_spec_anywhere_is_a_config_error_naming_helix_llm() -> None:
    with pytest.raises(ConfigError, match="HELIX_LLM"):
        infer_llm()


def test_missing_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        infer_llm("openai:gpt-4o-mini")


def test_llm_package_imports_without_the_provider_sdks() -> None:
    # A fresh interpreter where both SDKs are unimportable, as in a core-only install.
    code = (
        "import sys; sys.modules['openai'] = None; sys.modules['anthropic'] = None\n"
        "from helix_dbos.llm import infer_llm, OpenAICompatibleLLM, AnthropicLLM\n"
        "assert infer_llm('scripted').name == 'scripted'\n"
        "try:\n"
        "    infer_llm('anthropic:claude')\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.startswith("ConfigError")
    assert "helix-dbos[anthropic]" in out.stdout
