"""``helix-dbos ... --json | head``: a reader that goes away early ends the command quietly.

A real ``helix-dbos`` process writes into a pipe whose reading end is already closed (what
``head -c 1`` leaves behind once it has its byte): it exits 141 (128 + SIGPIPE, as a shell tool
killed by the pipe does) with nothing on stderr, not with a ``BrokenPipeError`` traceback.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helix_dbos.cli import EXIT_BROKEN_PIPE, main
from helix_dbos.core.session import SessionState
from helix_dbos.store.store import SessionStore


@pytest.fixture
def migrated(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'pipes.sqlite'}"
    assert main(["migrate", "--database-url", url]) == 0
    return url


def _into_closed_pipe(*argv: str) -> tuple[int, str]:
    """Run ``helix-dbos argv`` with its stdout a pipe nobody reads: (exit code, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "HELIX_DATABASE_URL"}
    process = subprocess.Popen(
        [sys.executable, "-m", "helix_dbos.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before the command writes a byte
    try:
        err = process.stderr.read().decode()
        code = process.wait(timeout=60)
    finally:
        process.kill()
        process.stderr.close()
    return code, err


@pytest.mark.parametrize("command", [["sessions", "--json"], ["executors", "--json"]])
def test_a_closed_pipe_ends_the_command_quietly(migrated: str, command: list[str]) -> None:
    code, err = _into_closed_pipe(*command, "--database-url", migrated)
    assert (code, err) == (EXIT_BROKEN_PIPE, "")


def test_a_reader_that_takes_one_byte_and_leaves(migrated: str) -> None:
    """``helix-dbos sessions --json --limit 500 | head -c 1``: the output is larger than the
    pipe's buffer, so the command is mid-write when the reader takes its byte and leaves."""
    asyncio.run(_sessions(migrated, 500))
    env = {k: v for k, v in os.environ.items() if k != "HELIX_DATABASE_URL"}
    process = subprocess.Popen(
        [sys.executable, "-m", "helix_dbos.cli", "sessions", "--json", "--limit", "500"]
        + ["--database-url", migrated],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        assert process.stdout.read(1) == b"["
        process.stdout.close()
        err = process.stderr.read().decode()
        code = process.wait(timeout=60)
    finally:
        process.kill()
        process.stderr.close()
    assert (code, err) == (EXIT_BROKEN_PIPE, "")


async def _sessions(url: str, count: int) -> None:
    store = SessionStore.from_url(url)
    try:

        async def create() -> None:
            for i in range(count):
                sid = f"ses_pipe_{i:04d}"
                await store.create_session(
                    SessionState(session_id=sid, agent_type="editor", root_session_id=sid)
                )

        await store.transact(create)  # one unit of work: quick
    finally:
        await store.close()
