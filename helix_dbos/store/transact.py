"""The transaction runner, ``transact``, and the retry loop it and the store's reads run in.

``transact`` runs a body in one transaction, bound to the running task, and retries the WHOLE
of it: on a lost compare-and-swap race (a ``StaleStateError``) up to a number of attempts, on
a ``RetryTransaction`` after its delay, and on a transient database fault (a dropped
connection, an admin shutdown, a serialization failure, ``faults.py``) with backoff until the
database is back or the caller's ``patience`` runs out (then ``StoreUnavailableError``). A
read that joins no transaction waits out faults the same way (``read_retried``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

from ..core.jitter import jitter
from ..core.session import SessionState
from ..errors import StaleStateError, StoreUnavailableError
from ..observability.log import log_event
from . import unit
from .batch import WriteBatch
from .dialect import Paths
from .engine import bound
from .faults import is_transient

__all__ = [
    "OWNERSHIP_ATTEMPTS",
    "PENDING_CLEAR_ATTEMPTS",
    "REQUEST_PATIENCE_SECONDS",
    "RetryTransaction",
    "patience",
    "read_retried",
    "retrying",
    "transact",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

#: CAS attempts for ownership writes (the seed's writeOwnership / writeBothPendingAndOwnership).
OWNERSHIP_ATTEMPTS = 3
#: CAS attempts for pending-entry clears (the seed's clearPending).
PENDING_CLEAR_ATTEMPTS = 5

#: How long a request (an HTTP call, a CLI command) waits out a database fault before it
#: answers ``store_unavailable``. Durable code (turns, the reconciler) waits for ever.
REQUEST_PATIENCE_SECONDS = 3.0

_patience: ContextVar[tuple[float | None] | None] = ContextVar("helix_store_patience", default=None)
"""The innermost ``patience`` block's seconds, boxed (``None``: outside any block)."""


class RetryTransaction(Exception):  # a control-flow signal, not an error
    """Raised inside ``transact`` to roll back and run the transaction again after ``delay``.

    For a reader that knows a commit it depends on is on its way (a turn woken with an answer
    that its transaction cannot see yet).
    """

    def __init__(self, reason: str, delay: float = 0.02) -> None:
        super().__init__(reason)
        self.delay = delay


class _Patience:
    # A plain class, not a generator context manager, and one context variable, not two:
    # every parked turn holds one open.
    __slots__ = ("_seconds", "_token")

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds

    def __enter__(self) -> None:
        self._token = _patience.set(_FOREVER if self._seconds is None else (self._seconds,))

    def __exit__(self, *_exc: object) -> None:
        _patience.reset(self._token)


_FOREVER: tuple[float | None] = (None,)


def patience(seconds: float | None) -> _Patience:
    """Within this block, store calls wait out database faults for ``seconds`` (``None``: for
    ever) before raising ``StoreUnavailableError``. Durable code waits for ever; requests use
    ``REQUEST_PATIENCE_SECONDS`` (the default outside any block)."""
    return _Patience(seconds)


def _current_patience() -> float | None:
    boxed = _patience.get()
    return REQUEST_PATIENCE_SECONDS if boxed is None else boxed[0]


def _backoff(attempt: int) -> float:
    return min(2.0, 0.05 * float(2 ** min(attempt, 6))) * jitter.uniform(0.5, 1.0)


async def retrying(
    attempt: Callable[[], Awaitable[T]],
    *,
    attempts: int = PENDING_CLEAR_ATTEMPTS,
    retry_event: str | None = None,
    failed_event: str | None = None,
    log_fields: dict[str, Any] | None = None,
) -> T:
    """Run ``attempt`` until it succeeds: again on a lost race (up to ``attempts``), on a
    ``RetryTransaction``, and on a transient database fault while the patience lasts.

    Raises:
        StaleStateError: every attempt lost its race (logged as ``failed_event``).
        StoreUnavailableError: the database stayed unreachable past the patience.
    """
    fields = log_fields or {}
    loop = asyncio.get_running_loop()
    wait = _current_patience()
    give_up = None if wait is None else loop.time() + wait
    races = faults = 0
    while True:
        try:
            return await attempt()
        except StaleStateError as exc:
            races += 1
            if races >= attempts:
                if failed_event:
                    log_event(failed_event, **fields, attempts=attempts, error=exc.message)
                raise StaleStateError(
                    f"Gave up after {attempts} compare-and-swap attempts",
                    **{**exc.details, **fields, "attempts": attempts},
                ) from exc
            if retry_event:
                log_event(retry_event, **fields, attempt=races)
            await asyncio.sleep(jitter.uniform(0.001, 0.005) * races)
        except RetryTransaction as again:
            await asyncio.sleep(again.delay)
        except Exception as exc:
            if not is_transient(exc):
                raise
            faults += 1
            if give_up is not None and loop.time() >= give_up:
                raise StoreUnavailableError() from exc
            if faults == 1:
                log_event("store.retrying", **fields, error=type(exc).__name__)
            await asyncio.sleep(_backoff(faults))


def read_retried(fn: F) -> F:
    """Make a read method wait out transient faults (unless it joins a unit of work, whose
    ``transact`` retries as a whole)."""

    @functools.wraps(fn)
    async def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if bound() is not None:
            # In a unit of work: a fault is the unit's to retry (a retry here would reuse the
            # broken connection).
            return await fn(self, *args, **kwargs)
        return await retrying(lambda: fn(self, *args, **kwargs))

    return run  # type: ignore[return-value]


async def transact(
    paths: Paths,
    body: Callable[[], Awaitable[T]],
    *,
    read: Sequence[SessionState],
    attempts: int,
    retry_event: str | None,
    failed_event: str | None,
    log_fields: dict[str, Any] | None,
    committed: Callable[[WriteBatch], None],
) -> T:
    """Run ``body`` as one unit of work, bound to the task, and commit it, retried whole (see
    ``SessionStore.transact``); inside an enclosing unit it simply joins.

    ``committed`` is called with the unit's queue once it committed (Postgres).
    """
    if bound() is not None:
        unit.remember(read)
        return await body()
    tries = 0

    async def attempt() -> T:
        nonlocal tries
        tries += 1
        with unit.remembering(read, first_attempt=tries == 1):
            return await paths.attempt(body, committed=committed)

    return await retrying(
        attempt,
        attempts=attempts,
        retry_event=retry_event,
        failed_event=failed_event,
        log_fields=log_fields,
    )
