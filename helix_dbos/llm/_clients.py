"""Building provider SDK clients: keys from the environment, SDK retries off, one per loop."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any, Generic, TypeVar
from weakref import WeakKeyDictionary

from ..errors import ConfigError

__all__ = ["PerLoopClients", "sdk_client_factory"]

C = TypeVar("C")


class PerLoopClients(Generic[C]):
    """One SDK client per event loop.

    The SDKs' connection pools are bound to the loop that opened them, and an adapter outlives
    loops (tests, worker threads, restarts).
    """

    def __init__(self, make: Callable[[], C]) -> None:
        self._make = make
        self._clients: WeakKeyDictionary[asyncio.AbstractEventLoop, C] = WeakKeyDictionary()

    def get(self) -> C:
        """The running loop's client, made on first use."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = self._make()
        return client


def sdk_client_factory(
    sdk_class: Callable[..., C],
    *,
    injected: Any,
    api_key: str | None,
    base_url: str | None,
    key_env: str,
    url_env: str,
    timeout: float,
    label: str,
) -> Callable[[], C]:
    """How to make the adapter's SDK client. Retries are always off: the durable model step
    retries (with backoff), so one attempt is one HTTP request.

    Raises:
        ConfigError: no API key and no base URL.
    """
    if injected is not None:
        # An injected client keeps its own pool; only its retries are turned off.
        fixed: C = injected.with_options(max_retries=0)
        return lambda: fixed
    key = api_key or os.environ.get(key_env)
    url = base_url or os.environ.get(url_env) or None
    if not key:
        if url is None:
            raise ConfigError(f"{label} needs an API key: pass api_key or set {key_env}")
        # A local or proxy endpoint may ignore the key, but the SDKs insist on one.
        key = "not-needed"
    return lambda: sdk_class(api_key=key, base_url=url, timeout=timeout, max_retries=0)
