"""The per-session submit rate limit (``http/limits.py``): a sliding window per key, all or
nothing, with an honest ``retryAfterSeconds``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helix_dbos.errors import ConfigError, RateLimitedError
from helix_dbos.http.limits import DEFAULT_SUBMIT_RATE_LIMIT, SlidingWindowLimiter, limiter_for


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limiter(
    limit: int = 3, window: float = 60.0, **options: int
) -> tuple[SlidingWindowLimiter, Clock]:
    clock = Clock()
    return SlidingWindowLimiter(limit, window, clock=clock, **options), clock


def retry_after(limiter_: SlidingWindowLimiter, key: str = "s", count: int = 1) -> int:
    with pytest.raises(RateLimitedError) as caught:
        limiter_.hit(key, count)
    assert caught.value.code == "rate_limited" and caught.value.retryable
    assert caught.value.details["limit"] == limiter_.limit
    return int(caught.value.details["retryAfterSeconds"])


def test_the_limit_is_per_key_and_per_window() -> None:
    """``limit`` hits pass; the next is refused; another key has its own window."""
    lim, _ = limiter()
    for _ in range(3):
        lim.hit("s")
    assert retry_after(lim) == 60
    lim.hit("other")


def test_the_window_slides() -> None:
    """A hit leaves the window exactly ``window`` seconds later, not before."""
    lim, clock = limiter()
    lim.hit("s")
    clock.now += 20
    lim.hit("s", 2)
    clock.now += 39.5
    assert retry_after(lim) == 1
    clock.now += 0.5
    lim.hit("s")
    assert retry_after(lim) == 20


def test_a_refused_request_counts_nothing() -> None:
    """All or nothing: a batch that does not fit is not partly counted."""
    lim, _ = limiter(limit=5)
    lim.hit("s", 3)
    assert retry_after(lim, count=3) == 60
    lim.hit("s", 2)


def test_retry_after_is_when_enough_slots_free_up() -> None:
    """For ``count`` hits, the wait is until the hit whose expiry makes room for all of them;
    a request over the whole limit is told to wait one window."""
    lim, clock = limiter(limit=3)
    for _ in range(3):
        lim.hit("s")
        clock.now += 10
    assert retry_after(lim, count=1) == 30
    assert retry_after(lim, count=2) == 40
    assert retry_after(lim, count=3) == 50
    assert retry_after(lim, count=4) == 60


def test_idle_keys_are_swept_when_the_table_is_full() -> None:
    """Past ``max_keys``, keys whose hits all left the window are forgotten; a key still in
    its window keeps its hits."""
    lim, clock = limiter(limit=1, max_keys=2)
    lim.hit("a")
    clock.now += 30
    lim.hit("b")
    clock.now += 31
    lim.hit("c")
    assert set(lim._hits) == {"b", "c"}
    assert retry_after(lim, "b") == 29


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "60"])
def test_a_bad_limit_is_refused(limit: object) -> None:
    """An integer >= 1, or a typed configuration error."""
    with pytest.raises(ConfigError):
        SlidingWindowLimiter(limit)  # type: ignore[arg-type]


def test_limiter_for_reads_the_router_option() -> None:
    """``True``: the default rate; ``None``/``False``: none; a number: that rate; a limiter:
    itself (routers given one share its windows)."""
    default = limiter_for(True)
    assert default is not None and default.limit == DEFAULT_SUBMIT_RATE_LIMIT
    assert default.window == 60.0
    assert limiter_for(None) is None
    assert limiter_for(False) is None
    numbered = limiter_for(5)
    assert numbered is not None and numbered.limit == 5
    shared = SlidingWindowLimiter(7)
    assert limiter_for(shared) is shared
    with pytest.raises(ConfigError):
        limiter_for(0)


# Pauses in quarter seconds: exact in binary, so the test's window arithmetic is the limiter's.
steps = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=120).map(lambda quarters: quarters / 4),
        st.integers(min_value=1, max_value=4),
    ),
    max_size=30,
)


@given(st.integers(min_value=1, max_value=5), steps)
def test_no_window_ever_holds_more_than_the_limit(
    limit: int, schedule: list[tuple[float, int]]
) -> None:
    """Whatever the timing: the hits accepted in any window never exceed the limit, a request
    is refused only when it would exceed it, and once ``retryAfterSeconds`` has passed the
    same request fits."""
    lim, clock = limiter(limit=limit, window=60.0)
    accepted: list[float] = []
    for pause, count in schedule:
        clock.now += pause
        in_window = [t for t in accepted if t > clock.now - 60.0]
        try:
            lim.hit("s", count)
        except RateLimitedError as refused:
            assert len(in_window) + count > limit
            if count <= limit:
                later = clock.now + refused.details["retryAfterSeconds"]
                assert len([t for t in accepted if t > later - 60.0]) + count <= limit
        else:
            assert len(in_window) + count <= limit
            accepted += [clock.now] * count
