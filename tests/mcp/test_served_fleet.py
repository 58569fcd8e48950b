"""Tasks answered by any process, and across a SIGKILL: two processes serving ``/mcp`` on
one Postgres database, the real SDK's client on each; on SQLite, where one process at a time
is the supported deployment, the second process is the first one's restart.

A task created by one process is answered with ``tasks/update`` through the other and read
``completed`` from both; a client without Tasks retries through the other process with the
``requestState`` the first answered; a task whose process is SIGKILLed while the turn waits on its
approval is read and answered through the other, and the restarted process (same executor)
continues the turn once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest

from tests.mcp.conftest import ROOT, free_port
from tests.mcp.tasks_client import connect, get_task, poll, update_task
from tests.processes import reaped
from tests.support.bank import ARGS

ACME = {"x-tenant": "acme"}
APPROVE = {"action": "accept", "content": {"approved": True}}


@contextmanager
def worker(url: str, executor: str, log: Path, port: int | None = None) -> Iterator[str]:
    """A serving process; its ``/mcp`` URL. Killed (if still running) on the way out."""
    port = port or free_port()
    env = {"MCP_BANK_LOG": str(log), "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp.served_worker", url, str(port), executor],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    with reaped(proc):
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                httpx.post(f"http://127.0.0.1:{port}/mcp", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the worker did not serve"
                time.sleep(0.1)
        worker.processes[executor] = proc  # type: ignore[attr-defined]
        yield f"http://127.0.0.1:{port}/mcp"


worker.processes = {}  # type: ignore[attr-defined]


def runs(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def test_a_task_is_answered_through_another_process(pg_url: str, tmp_path: Path) -> None:
    """Created by A, answered with ``tasks/update`` through B, ``completed`` read from both;
    the approved tool ran once, in A, where the turn runs."""
    log = tmp_path / "bank.jsonl"
    with worker(pg_url, "mcp-a", log) as a_url, worker(pg_url, "mcp-b", log) as b_url:
        async with connect(a_url, ACME) as a, connect(b_url, ACME) as b:
            created = await a.session.call_tool("banker", {"message": "pay"}, allow_claimed=True)
            tid = created.task_id  # type: ignore[union-attr]
            [key] = (await poll(a, tid, "input_required"))["inputRequests"]
            assert (await get_task(b, tid))["status"] == "input_required"
            await update_task(b, tid, {key: APPROVE})
            done = await poll(b, tid, "completed")
            assert done["result"]["content"][0]["text"].startswith("ok: ")
            assert (await get_task(a, tid))["status"] == "completed"
    [ran] = runs(log)
    assert {k: ran[k] for k in ARGS} == ARGS
    assert ran["pid"] == worker.processes["mcp-a"].pid  # type: ignore[attr-defined]


async def test_a_retry_with_input_responses_is_accepted_by_another_process(
    pg_url: str, tmp_path: Path
) -> None:
    """A client without Tasks: A answers ``input_required`` with its ``requestState``; the
    retry carrying it and the ``inputResponses`` goes to B, which submits and answers the
    agent's reply (the state is not sealed with a per-process key)."""
    log = tmp_path / "bank.jsonl"
    message = {"message": "pay"}
    with worker(pg_url, "mcp-a", log) as a_url, worker(pg_url, "mcp-b", log) as b_url:
        async with connect(a_url, ACME, tasks=False) as a:
            asked = await a.session.call_tool("banker", message, allow_input_required=True)
        assert isinstance(asked, types.InputRequiredResult) and asked.input_requests
        [key] = asked.input_requests
        answer = types.ElicitResult(action="accept", content={"approved": True})
        async with connect(b_url, ACME, tasks=False) as b:
            done = await b.session.call_tool(
                "banker",
                message,
                input_responses={key: answer},
                request_state=asked.request_state,
                allow_input_required=True,
            )
        assert isinstance(done, types.CallToolResult) and done.is_error is False
        assert done.content[0].text.startswith("ok: ")  # type: ignore[union-attr]
    assert len(runs(log)) == 1


async def test_sigkill_while_a_task_waits_then_answered_after_the_restart(
    pg_url: str, tmp_path: Path
) -> None:
    """A is SIGKILLed while its turn waits on the approval; B still reads the task
    ``input_required`` and takes its answer; the fleet continues the turn once (B adopting
    the dead executor's turn, or A restarted with the same executor): ``completed``, the
    tool run once, never by the killed process."""
    log = tmp_path / "bank.jsonl"
    port = free_port()
    with worker(pg_url, "mcp-b", log) as b_url:
        with worker(pg_url, "mcp-a", log, port) as a_url:
            async with connect(a_url, ACME) as a:
                created = await a.session.call_tool(
                    "banker", {"message": "pay"}, allow_claimed=True
                )
                tid = created.task_id  # type: ignore[union-attr]
                await poll(a, tid, "input_required")
            killed = worker.processes["mcp-a"]  # type: ignore[attr-defined]
            killed.kill()  # SIGKILL
            killed.wait(30)
            killed_pid = killed.pid
        async with connect(b_url, ACME) as b:
            [key] = (await poll(b, tid, "input_required"))["inputRequests"]
            answered = await update_task(b, tid, {key: APPROVE})
            assert answered["_meta"]["io.helix-dbos/answers"] == {key: "accepted"}
            assert runs(log) == [], "nothing ran while A was down"
            with worker(pg_url, "mcp-a", log, port):
                restarted_pid = worker.processes["mcp-a"].pid  # type: ignore[attr-defined]
                done = await poll(b, tid, "completed", timeout=90)
            assert done["result"]["isError"] is False
    [ran] = runs(log)
    assert {k: ran[k] for k in ARGS} == ARGS
    # Run once, by the fleet: B adopting the dead executor's turn, or A restarted.
    assert ran["pid"] in (restarted_pid, worker.processes["mcp-b"].pid)  # type: ignore[attr-defined]
    assert ran["pid"] != killed_pid


async def test_on_sqlite_a_task_is_answered_through_the_process_after_a_sigkill(
    sqlite_url: str, tmp_path: Path
) -> None:
    """SQLite: A creates the task and is SIGKILLed while its turn waits on the approval; B,
    started after A is gone (A's restart: its executor), reads the task ``input_required``,
    answers it with ``tasks/update`` and reads ``completed``: the tool ran once, in B."""
    log = tmp_path / "bank.jsonl"
    with worker(sqlite_url, "mcp-a", log) as a_url:
        async with connect(a_url, ACME) as a:
            created = await a.session.call_tool("banker", {"message": "pay"}, allow_claimed=True)
            tid = created.task_id  # type: ignore[union-attr]
            await poll(a, tid, "input_required")
        killed = worker.processes["mcp-a"]  # type: ignore[attr-defined]
        killed.kill()  # SIGKILL
        killed.wait(30)
    with worker(sqlite_url, "mcp-a", log) as b_url:
        async with connect(b_url, ACME) as b:
            [key] = (await poll(b, tid, "input_required"))["inputRequests"]
            answered = await update_task(b, tid, {key: APPROVE})
            assert answered["_meta"]["io.helix-dbos/answers"] == {key: "accepted"}
            done = await poll(b, tid, "completed", timeout=90)
            assert done["result"]["isError"] is False
        restarted = worker.processes["mcp-a"].pid  # type: ignore[attr-defined]
    [ran] = runs(log)
    assert {k: ran[k] for k in ARGS} == ARGS
    assert ran["pid"] == restarted != killed.pid


async def test_on_sqlite_a_retry_with_input_responses_is_accepted_after_a_restart(
    sqlite_url: str, tmp_path: Path
) -> None:
    """SQLite: a client without Tasks gets ``input_required`` from A; A is SIGKILLed; its
    retry with the ``requestState`` A answered and the ``inputResponses`` goes to the
    restarted process, which submits and answers the agent's reply."""
    log = tmp_path / "bank.jsonl"
    message = {"message": "pay"}
    with worker(sqlite_url, "mcp-a", log) as a_url:
        async with connect(a_url, ACME, tasks=False) as a:
            asked = await a.session.call_tool("banker", message, allow_input_required=True)
        killed = worker.processes["mcp-a"]  # type: ignore[attr-defined]
        killed.kill()  # SIGKILL
        killed.wait(30)
    assert isinstance(asked, types.InputRequiredResult) and asked.input_requests
    [key] = asked.input_requests
    answer = types.ElicitResult(action="accept", content={"approved": True})
    with worker(sqlite_url, "mcp-a", log) as b_url:
        async with connect(b_url, ACME, tasks=False) as b:
            done = await b.session.call_tool(
                "banker",
                message,
                input_responses={key: answer},
                request_state=asked.request_state,
                allow_input_required=True,
            )
    assert isinstance(done, types.CallToolResult) and done.is_error is False
    assert done.content[0].text.startswith("ok: ")  # type: ignore[union-attr]
    assert len(runs(log)) == 1


pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
