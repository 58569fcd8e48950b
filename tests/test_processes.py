"""``reaped``: a child of a failing test is killed and reaped, not left sleeping."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.processes import reaped


def test_a_failure_inside_the_block_kills_the_child() -> None:
    """The block raises before any kill of its own: the child still ends, and is reaped."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)"], stdout=subprocess.PIPE
    )
    with pytest.raises(AssertionError), reaped(child):
        raise AssertionError("the test failed before its SIGKILL")
    assert child.returncode is not None and child.returncode < 0
    assert child.stdout is not None and child.stdout.closed
