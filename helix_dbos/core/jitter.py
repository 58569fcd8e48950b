"""The library's own random source, for jitter (retry backoff, heartbeat spread).

Drawing from a ``random.Random`` of our own leaves the global ``random`` state to the
application: a program that seeds ``random`` for reproducible runs gets the same sequence
with a runtime in it as without.
"""

from __future__ import annotations

import random

__all__ = ["jitter"]

jitter = random.Random()
