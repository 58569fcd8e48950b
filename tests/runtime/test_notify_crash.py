"""Notifications survive the process: a SIGKILL while a hook runs is delivered again after a
restart, and two processes tell each reminder once.

Child processes (``notify_worker.py``) run runtimes of their own on the test's database (one
DBOS per process); the shared Postgres server is never touched, only the test's database.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from helix_dbos.config import HelixSettings
from helix_dbos.runtime import AgentRuntime
from helix_dbos.store import outbox
from helix_dbos.store.store import SessionStore
from helix_dbos.testing import capture_log_events
from tests.processes import reaped
from tests.runtime import notify_worker
from tests.runtime.notify_helpers import FAST, Recorder, approve
from tests.runtime.notify_worker import gatekeeper

WORKER = Path(notify_worker.__file__)


def _run(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _line(proc: subprocess.Popen[str]) -> Any:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else "the worker printed nothing"
    return json.loads(line)


@pytest.mark.slow
async def test_sigkill_while_the_pending_hook_runs_then_a_restart_delivers_it(
    make_runtime: Any, db_url: str
) -> None:
    with reaped(_run("park", db_url)) as parker:
        told = _line(parker)  # printed by the hook itself: the event is claimed, in flight
        call = _line(parker)
        parker.send_signal(signal.SIGKILL)
        parker.wait(timeout=10)
    assert parker.returncode == -signal.SIGKILL
    assert told["attempt"] == 1 and told["key"] == f"pending:{call['approvalId']}"

    # Dead mid-delivery: the event is still queued, claimed once.
    store = SessionStore.from_url(db_url)
    try:
        [row] = await outbox.list_rows(store, kind="pending")
    finally:
        await store.close()
    assert (row.state, row.attempts, row.event_key) == ("queued", 1, told["key"])

    # The restart (same executor: it recovers the parked turn) delivers it once its lease
    # (2 s in the worker) has run out, under the same key.
    rt = await make_runtime([gatekeeper()])
    pending, resolved = Recorder(), Recorder()
    rt.configure_notifications(**FAST)
    rt.on_pending(pending)
    rt.on_resolved(resolved)
    await pending.until(lambda: bool(pending.notes), timeout=30)
    [note] = pending.notes
    assert (note.key, note.attempt, note.session_id) == (told["key"], 2, told["session"])
    assert note.input == {"amount": 40}

    # The call still waits on the recovered turn; its approval is told as resolved.
    [waiting] = (await rt.status(told["session"]))["pendingToolCalls"]
    await approve(rt, told["session"], waiting)
    await resolved.until(lambda: bool(resolved.notes))
    assert resolved.notes[0].key == f"resolved:{call['approvalId']}"
    assert resolved.notes[0].outcome == "answered" and resolved.notes[0].attempt == 1
    rows = {r.kind: (r.state, r.attempts) for r in await outbox.list_rows(rt.store)}
    assert rows["pending"] == ("delivered", 2)


class _Lines:
    """A child's stdout, read in a thread: ``hooks`` and ``logs`` it printed so far."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.hooks: list[str] = []
        self.logs: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            value = json.loads(line)
            if value == "ready":
                self.ready.set()
            elif "hook" in value:
                self.hooks.append(value["hook"])
            else:
                self.logs.append(value["log"])


@pytest.fixture
async def pg_runtime(pg_url: str) -> AsyncIterator[AgentRuntime]:
    """A launched runtime on a fresh Postgres database (this test needs no SQLite twin)."""
    settings = HelixSettings(
        database_url=pg_url, executor_id="test-exec", application_version="test"
    )
    runtime = AgentRuntime([gatekeeper(timeout=60, remind_before=58.5)], settings)
    await runtime.launch()
    try:
        yield runtime
    finally:
        await runtime.shutdown()


@pytest.mark.slow
async def test_two_processes_tell_each_reminder_once(pg_runtime: AgentRuntime, pg_url: str) -> None:
    """This process and a child, both with an ``on_deadline_near`` hook and polling every
    20 ms, race for 8 reminders due at the same moment: each is streamed, logged and told
    once, by one of them. (Postgres: SQLite is one process; its race of two dispatchers is in
    test_notifications.py.)"""
    rt = pg_runtime
    mine = Recorder()
    rt.configure_notifications(poll_seconds=0.02)
    rt.on_deadline_near(mine)
    with reaped(_run("remind", pg_url)) as child:
        lines = _Lines(child)
        assert await asyncio.to_thread(lines.ready.wait, 60), "the child did not launch"
        with capture_log_events() as logged:
            sids = [(await rt.start("gatekeeper", f"pay {i}")).session_id for i in range(8)]
            async with asyncio.timeout(30):
                while len(mine.notes) + len(lines.hooks) < len(sids):
                    await asyncio.sleep(0.05)
                # Every reminder's row is settled: each claim of it (one more attempt in the
                # row) and its stream event are in the database by then, and a settled row
                # is claimed no more.
                while any(
                    r.state == outbox.QUEUED
                    for r in await outbox.list_rows(rt.store, kind="deadline_near")
                ):
                    await asyncio.sleep(0.05)
        child.kill()
    keys = [n.key for n in mine.notes] + lines.hooks
    assert len(keys) == len(set(keys)) == len(sids), keys
    for sid in sids:
        assert len([e for e in await rt.events(sid) if e.type == "tool_deadline_near"]) == 1
    logs = [e["sessionId"] for e in logged if e["event"] == "client_tool.deadline_near"]
    logs += [e["sessionId"] for e in lines.logs]
    assert sorted(logs) == sorted(sids)
    rows = await outbox.list_rows(rt.store, kind="deadline_near")
    assert {(r.state, r.attempts) for r in rows} == {("delivered", 1)}
    print(f"reminders told here: {len(mine.notes)}, by the child: {len(lines.hooks)}")
