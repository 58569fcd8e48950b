"""Building provider SDK clients (``llm/_clients.py``): keys from the environment, the SDK's
own retries always off, one client per event loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helix_dbos.errors import ConfigError
from helix_dbos.llm._clients import PerLoopClients, sdk_client_factory

KEY_ENV, URL_ENV = "HELIX_TEST_KEY", "HELIX_TEST_URL"


class FakeSDK:
    """Records what the adapter would have built its SDK client with."""

    def __init__(self, **options: Any) -> None:
        self.options = options

    def with_options(self, **options: Any) -> FakeSDK:
        return FakeSDK(**{**self.options, **options})


def factory(**options: Any) -> Any:
    values: dict[str, Any] = {
        "injected": None,
        "api_key": None,
        "base_url": None,
        "key_env": KEY_ENV,
        "url_env": URL_ENV,
        "timeout": 12.0,
        "label": "TestLLM",
        **options,
    }
    return sdk_client_factory(FakeSDK, **values)


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(URL_ENV, raising=False)


def test_explicit_key_and_url_with_retries_off() -> None:
    """One attempt is one HTTP request: the durable step does the retrying."""
    client = factory(api_key="k", base_url="http://llm")()
    assert client.options == {
        "api_key": "k",
        "base_url": "http://llm",
        "timeout": 12.0,
        "max_retries": 0,
    }


def test_the_environment_fills_what_is_not_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key and URL variables are read when the factory is made; arguments win."""
    monkeypatch.setenv(KEY_ENV, "from-env")
    monkeypatch.setenv(URL_ENV, "http://env")
    assert factory()().options["api_key"] == "from-env"
    assert factory()().options["base_url"] == "http://env"
    assert factory(api_key="arg", base_url="http://arg")().options["api_key"] == "arg"
    make = factory()
    monkeypatch.setenv(KEY_ENV, "changed")
    assert make().options["api_key"] == "from-env"


def test_a_local_endpoint_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a base URL and no key the SDK gets a placeholder (it insists on one)."""
    assert factory(base_url="http://localhost:8080")().options["api_key"] == "not-needed"
    monkeypatch.setenv(URL_ENV, "")
    with pytest.raises(
        ConfigError, match=f"TestLLM needs an API key: pass api_key or set {KEY_ENV}"
    ):
        factory()


def test_no_key_and_no_url_is_refused_when_the_adapter_is_built() -> None:
    """A typed configuration error, not a failure at the first model call."""
    with pytest.raises(ConfigError):
        factory()


def test_an_injected_client_is_used_with_its_retries_off() -> None:
    """The application's client keeps its own settings (and needs no key here)."""
    injected = FakeSDK(api_key="mine", max_retries=5, timeout=1.0)
    make = factory(injected=injected)
    assert make().options == {"api_key": "mine", "max_retries": 0, "timeout": 1.0}
    assert make() is make()


def test_one_client_per_loop() -> None:
    """Made on first use in a loop, reused in it, never shared with another loop."""
    made: list[object] = []

    def make() -> object:
        made.append(object())
        return made[-1]

    clients = PerLoopClients(make)

    async def twice() -> tuple[object, object]:
        return clients.get(), clients.get()

    first = asyncio.run(twice())
    second = asyncio.run(twice())
    assert first[0] is first[1]
    assert second[0] is second[1]
    assert first[0] is not second[0]
    assert len(made) == 2


def test_a_client_needs_a_running_loop() -> None:
    """Outside a loop there is no client to give (the adapters only call it inside one)."""
    clients = PerLoopClients(object)
    with pytest.raises(RuntimeError):
        clients.get()
