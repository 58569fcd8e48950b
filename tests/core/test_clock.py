"""``now_ms``: the wall clock in epoch milliseconds, the one unit the framework stores."""

from __future__ import annotations

import time

from helix_dbos.core.clock import now_ms


def test_now_ms_is_the_wall_clock_in_whole_milliseconds() -> None:
    """An int between two readings of the system clock (not seconds, not microseconds)."""
    before = time.time_ns() // 1_000_000
    value = now_ms()
    after = time.time_ns() // 1_000_000
    assert isinstance(value, int)
    # ``before - 1``: the float seconds ``now_ms`` multiplies may land a hair under a whole
    # millisecond (x.682 s * 1000 = x681.9999...), which truncates to the one before.
    assert before - 1 <= value <= after
