"""The test run cannot lie: a broken configuration or a failing test gives a non-zero exit.

``tests/conftest.py`` ends a session the usual way, unless a thread a test left running would
hold the interpreter: then it leaves early. These runs, with that conftest loaded and the
project's pytest configuration, show that neither way hides a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_pytest(
    test_file: Path, *options: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """pytest on ``test_file`` with this project's configuration and conftest."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.conftest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(ROOT),
            *options,
            str(test_file),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=None if env is None else {**os.environ, **env},
    )


@pytest.fixture
def passing(tmp_path: Path) -> Path:
    test = tmp_path / "test_passing.py"
    test.write_text("def test_ok() -> None:\n    assert True\n")
    return test


def test_a_passing_run_exits_zero(passing: Path) -> None:
    """The baseline: the same command on a passing test exits 0."""
    done = run_pytest(passing)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_a_broken_configuration_fails_the_run(passing: Path) -> None:
    """A malformed option (here pytest-timeout's ``timeout``) is an INTERNALERROR and exit 3,
    not a silent exit 0 with no test run."""
    done = run_pytest(passing, "-o", "timeout=notanumber")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Invalid timeout" in done.stdout + done.stderr


def test_an_unknown_option_fails_the_run(passing: Path) -> None:
    """--strict-config: an unknown ini option is an error, not a warning."""
    done = run_pytest(passing, "-o", "no_such_option=1")
    assert done.returncode != 0, done.stdout + done.stderr


def test_a_failing_test_fails_the_run(tmp_path: Path) -> None:
    """A failing test exits 1."""
    test = tmp_path / "test_failing.py"
    test.write_text("def test_no() -> None:\n    assert False\n")
    done = run_pytest(test)
    assert done.returncode == 1, done.stdout + done.stderr


def test_a_warning_fails_the_run(tmp_path: Path) -> None:
    """``filterwarnings = error``: a warning raised in a test fails it."""
    test = tmp_path / "test_warning.py"
    test.write_text(
        "import warnings\n\n\ndef test_warns() -> None:\n"
        "    warnings.warn('deprecated', DeprecationWarning, stacklevel=1)\n"
    )
    done = run_pytest(test)
    assert done.returncode == 1, done.stdout + done.stderr


#: A test that leaves a thread running for ever (as a stuck DBOS worker would), then passes or
#: fails as ``OUTCOME`` says.
STUCK_THREAD_TEST = """\
import threading

OUTCOME = {outcome}


def test_leaves_a_thread() -> None:
    threading.Thread(target=threading.Event().wait, name="stuck-worker").start()
    assert OUTCOME
"""


@pytest.mark.parametrize(("outcome", "code"), [(True, 0), (False, 1)])
def test_a_thread_left_running_ends_the_run_with_its_status(
    tmp_path: Path, outcome: bool, code: int
) -> None:
    """A thread that would hold the interpreter for ever: after the grace period the run
    leaves, names it, and keeps the session's status (0 when every test passed, 1 when one
    failed)."""
    test = tmp_path / "test_stuck.py"
    test.write_text(STUCK_THREAD_TEST.format(outcome=outcome))
    done = run_pytest(test, env={"HELIX_TEST_THREAD_GRACE_SECONDS": "0.5"})
    assert done.returncode == code, done.stdout + done.stderr
    assert "threads still running at the end of the session: stuck-worker" in done.stderr
