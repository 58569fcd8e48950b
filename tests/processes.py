"""Child processes of tests never outlive them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["reaped"]


@contextmanager
def reaped(proc: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """Yield ``proc``; on the way out, however the block ends, kill it if it still runs and
    reap it (a crash test that fails before its SIGKILL would otherwise leave its worker
    parked for an hour)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            proc.communicate(timeout=30)  # reap, and close its pipes
        except ValueError:  # a pipe was already closed by the test
            proc.wait(timeout=30)
