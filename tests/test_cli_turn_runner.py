"""What ``inspect`` and ``fail-call`` say about the process behind a turn.

One process parks two turns and stops; with nothing running, ``inspect`` shows a workflow that
was never recovered (``recoveries=0``, though DBOS's ``recovery_attempts`` already reads 1) and
``fail-call`` says the turn continues once a process is up. A process with the same executor id
then comes up: it recovers both turns (the failed one completes, which is what ``fail-call``
promised), ``inspect`` shows ``recoveries=1``, and ``fail-call`` with that process alive says
the turn continues, as it does. Each process runs on its own event loop (a stopped DBOS leaves
its loop's thread pool shut down). On both backends: liveness is the fleet's heartbeat table,
read with the database's clock on Postgres and this machine's on SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import sys
import time
from typing import Any

from helix_dbos.cli import main
from helix_dbos.config import HelixSettings
from helix_dbos.demo import demo_agents
from helix_dbos.runtime import AgentRuntime

FAIL_TEXT = "the tab was closed"


def _settings(url: str) -> HelixSettings:
    return HelixSettings(database_url=url, executor_id="runner-1")


def cli(*argv: str) -> tuple[int, str, str]:
    """``helix-dbos`` in this process: exit code, stdout, stderr (captured here, not with
    ``capsys``: DBOS keeps the stderr it first saw for its own log handler)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _dbos_logs_to_stderr() -> None:
    for handler in logging.getLogger("dbos").handlers:
        # A handler made while an earlier test's capsys was active writes to a closed file.
        stream = getattr(handler, "stream", None)
        if isinstance(handler, logging.StreamHandler) and getattr(stream, "closed", False):
            handler.setStream(sys.stderr)


async def _park_two_and_stop(url: str) -> list[tuple[str, str]]:
    _dbos_logs_to_stderr()
    runtime = AgentRuntime(demo_agents(), _settings(url))
    await runtime.launch()
    try:
        parked = []
        for text in ("replace 'a' with 'b'", "replace 'c' with 'd'"):
            handle = await runtime.start("editor", text)
            (call,) = await runtime.wait_for_pending(handle.session_id)
            parked.append((handle.session_id, str(call["toolCallId"])))
    finally:
        await runtime.shutdown()
    return parked


def _workflow(url: str, session_id: str) -> dict[str, Any]:
    code, out, err = cli("inspect", session_id, "--json", "--database-url", url)
    assert (code, err) == (0, ""), err
    workflow: dict[str, Any] = json.loads(out)["workflow"]
    return workflow


async def _come_back_up(url: str, recovered: tuple[str, str], failed: str) -> None:
    """The same executor starts again: both turns recover; then fail-call with it alive."""
    _dbos_logs_to_stderr()
    runtime = AgentRuntime(demo_agents(), _settings(url))
    await runtime.launch()
    try:
        # The call failed while nothing ran continues now: it ends in words, not waiting.
        assert (await runtime.wait(failed, timeout=30))["status"] == "completed"
        tool = [m for m in await runtime.messages(failed) if m.role == "tool"]
        assert [(m.is_error, m.content) for m in tool] == [(True, FAIL_TEXT)]

        sid, call = recovered
        deadline = time.monotonic() + 30
        while (workflow := await asyncio.to_thread(_workflow, url, sid))["recoveries"] != 1:
            assert time.monotonic() < deadline, workflow
            await asyncio.sleep(0.1)
        assert workflow["dbosRecoveryAttempts"] == 2 and workflow["status"] == "PENDING"
        code, out, err = await asyncio.to_thread(cli, "inspect", sid, "--database-url", url)
        assert code == 0 and " recoveries=1 " in out, out

        code, out, err = await asyncio.to_thread(
            cli, "fail-call", sid, call, "--error", FAIL_TEXT, "--database-url", url
        )
        assert (code, err) == (0, "")
        assert out == f"failed {call} in {sid} with {FAIL_TEXT!r}: the turn continues\n"
        assert (await runtime.wait(sid, timeout=30))["status"] == "completed"
    finally:
        await runtime.shutdown()


def test_recoveries_and_fail_call_with_and_without_a_process(db_url: str) -> None:
    (first, first_call), (second, second_call) = asyncio.run(_park_two_and_stop(db_url))

    # Nothing runs now. The parked turn's workflow ran once and was never recovered.
    workflow = _workflow(db_url, first)
    assert workflow["status"] == "PENDING"
    assert (workflow["recoveries"], workflow["dbosRecoveryAttempts"]) == (0, 1)
    code, out, _ = cli("inspect", first, "--database-url", db_url)
    assert code == 0 and " recoveries=0 " in out and "recovery_attempts" not in out

    code, out, err = cli(
        "fail-call", second, second_call, "--error", FAIL_TEXT, "--database-url", db_url
    )
    assert (code, err) == (0, "")
    assert out.startswith(f"failed {second_call} in {second} with {FAIL_TEXT!r}: ")
    assert "no helix-dbos process is running on this database" in out
    assert "the turn continues once one is up" in out

    asyncio.run(_come_back_up(db_url, (first, first_call), second))
