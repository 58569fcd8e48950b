"""The optional per-session submit rate limit: an in-memory sliding window.

It bounds how fast one session's submits reach the runtime (a buggy client's retry loop, or a
flood with a stolen token). It is per process: behind several workers, each keeps its own
window, so put a shared limiter upstream (a proxy) when that matters.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from ..errors import ConfigError, RateLimitedError

__all__ = ["DEFAULT_SUBMIT_RATE_LIMIT", "SlidingWindowLimiter", "limiter_for"]

#: Submits per minute per session when the limit is enabled (ordinary client-tool pacing).
DEFAULT_SUBMIT_RATE_LIMIT = 60


class SlidingWindowLimiter:
    """At most ``limit`` hits per key in any ``window_seconds``.

    Args:
        limit: hits allowed per window.
        window_seconds: the window's length.
        max_keys: keys kept before idle ones are swept (bounds memory under many sessions).
        clock: a monotonic clock in seconds.
    """

    def __init__(
        self,
        limit: int,
        window_seconds: float = 60.0,
        *,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError("The submit rate limit must be an integer >= 1 per minute")
        self.limit = limit
        self.window = window_seconds
        self._max_keys = max_keys
        self._clock = clock
        self._hits: dict[str, deque[float]] = {}

    def hit(self, key: str, count: int = 1) -> None:
        """Count ``count`` hits for ``key`` (all or none).

        Raises:
            RateLimitedError: the window has no room for them; nothing is counted (the caller
                stores nothing), and ``retryAfterSeconds`` says when enough slots free up.
        """
        now = self._clock()
        hits = self._hits.get(key)
        if hits is None:
            if len(self._hits) >= self._max_keys:
                self._sweep(now)
            hits = self._hits[key] = deque()
        while hits and hits[0] <= now - self.window:
            hits.popleft()
        if len(hits) + count > self.limit:
            # The oldest hit whose expiry makes room for ``count`` (a request over the whole
            # limit never fits: it is told to wait one window).
            index = len(hits) + count - self.limit - 1
            oldest = hits[index] if index < len(hits) else now
            retry_after = max(1, math.ceil(oldest + self.window - now))
            raise RateLimitedError(
                f"Too many submits for this session: at most {self.limit} per minute",
                retryAfterSeconds=retry_after,
                limit=self.limit,
            )
        hits.extend([now] * count)

    def _sweep(self, now: float) -> None:
        for key in [k for k, v in self._hits.items() if not v or v[-1] <= now - self.window]:
            del self._hits[key]


def limiter_for(
    rate_limit_per_minute: int | bool | SlidingWindowLimiter | None,
) -> SlidingWindowLimiter | None:
    """The per-session limiter a router option asks for: ``True`` is the default rate,
    ``None`` or ``False`` none; a ``SlidingWindowLimiter`` is used as it is (routers given the
    same one share each session's window)."""
    if isinstance(rate_limit_per_minute, SlidingWindowLimiter):
        return rate_limit_per_minute
    if rate_limit_per_minute is True:
        return SlidingWindowLimiter(DEFAULT_SUBMIT_RATE_LIMIT)
    if rate_limit_per_minute is None or rate_limit_per_minute is False:
        return None
    return SlidingWindowLimiter(rate_limit_per_minute)
