"""Helpers for the observability tests: flaky compare-and-swap writes and event lookups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from helix_dbos.config import HelixSettings
from helix_dbos.core.clock import now_ms
from helix_dbos.errors import StaleStateError
from helix_dbos.store.store import SessionStore

__all__ = [
    "APP_VERSION",
    "EXECUTOR_ID",
    "Call",
    "Dataset",
    "FlakySaves",
    "crash_a_parked_turn",
    "events_named",
    "one_event",
    "populate",
    "settings_for",
]

#: Every observability runtime (and the crash test's child) runs as this executor and version.
EXECUTOR_ID = "obs-exec"
APP_VERSION = "obs"


def settings_for(url: str, **extra: Any) -> HelixSettings:
    """The settings every observability runtime uses (pinned executor id and version)."""
    values: dict[str, Any] = {
        "database_url": url,
        "executor_id": EXECUTOR_ID,
        "application_version": APP_VERSION,
    }
    values.update(extra)
    return HelixSettings(**values)


class FlakySaves:
    """Make the next ``count`` session writes lose their compare-and-swap race, for real.

    The patched ``SessionStore._save`` (every swap of a session row goes through it) raises the store's own ``StaleStateError``, exactly as a
    concurrent writer would make it, so the runtime's retry loop and its events run unchanged.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.remaining = 0
        self.raised = 0
        original = SessionStore._save

        async def save(store: SessionStore, state: Any, conn: Any) -> Any:
            if self.remaining > 0:
                self.remaining -= 1
                self.raised += 1
                raise StaleStateError(
                    f"Session {state.session_id!r} changed since version {state.version}",
                    sessionId=state.session_id,
                )
            return await original(store, state, conn)

        monkeypatch.setattr(SessionStore, "_save", save)

    def arm(self, count: int) -> None:
        """Fail the next ``count`` writes."""
        self.remaining = count

    @contextmanager
    def failing(self, count: int) -> Iterator[None]:
        """Fail up to ``count`` writes inside the block, then write normally again."""
        self.arm(count)
        try:
            yield
        finally:
            self.remaining = 0


def events_named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The captured events called ``name``, in order."""
    return [e for e in events if e["event"] == name]


def one_event(events: list[dict[str, Any]], name: str, **match: Any) -> dict[str, Any]:
    """The single captured event ``name`` whose fields match ``match``."""
    found = [e for e in events_named(events, name) if all(e.get(k) == v for k, v in match.items())]
    assert len(found) == 1, f"{name} {match}: {found} in {[e['event'] for e in events]}"
    return found[0]


# -- a dataset of real turns ---------------------------------------------------------------


@dataclass
class Call:
    """One client call of the dataset, with what the test knows about its wait."""

    session_id: str
    tool_call_id: str
    tool_name: str
    outcome: str
    registered_at: int
    wait_low: int
    wait_high: int


@dataclass
class Dataset:
    """The calls the dataset made, by outcome."""

    calls: list[Call] = field(default_factory=list)
    sessions: dict[str, str] = field(default_factory=dict)

    def by(self, outcome: str) -> list[Call]:
        """The calls that ended ``outcome``."""
        return [c for c in self.calls if c.outcome == outcome]


async def _answer(
    runtime: Any, data: Dataset, sid: str, pending: dict[str, Any], timeout: float, **answer: Any
) -> None:
    registered = pending["deadlineAt"] - int(timeout * 1000)
    before = now_ms()
    await runtime.submit_tool_result(sid, pending["toolCallId"], **answer)
    after = now_ms()
    data.calls.append(
        Call(
            sid,
            pending["toolCallId"],
            pending["toolName"],
            "answered",
            registered,
            before - registered,
            after - registered,
        )
    )


async def populate(runtime: Any, *, timeout: float, fast_timeout: float) -> Dataset:
    """Real turns: two answered calls, one timeout and one abort (then every turn has ended).

    * ``answered``: ``ops`` calls ``pick_color`` then ``confirm``; both are answered.
    * ``timeout``: ``ops_fast`` calls ``pick_color``; nobody answers before its deadline.
    * ``aborted``: ``ops`` calls ``confirm``; the session is interrupted while it waits.
    """
    data = Dataset()
    answered = await runtime.start("ops", "pick_color confirm")
    sid = data.sessions["answered"] = answered.session_id
    (first,) = await runtime.wait_for_pending(sid)
    await _answer(runtime, data, sid, first, timeout, result={"color": "red"})
    (second,) = await runtime.wait_for_pending(sid)
    await _answer(runtime, data, sid, second, timeout, result={"ok": True})
    await runtime.wait(sid)

    late = await runtime.start("ops_fast", "pick_color")
    sid = data.sessions["timeout"] = late.session_id
    (call,) = await runtime.wait_for_pending(sid)
    await runtime.wait(sid)
    wait = int(fast_timeout * 1000)
    data.calls.append(
        Call(
            sid, call["toolCallId"], "pick_color", "timeout", call["deadlineAt"] - wait, wait, wait
        )
    )

    stopped = await runtime.start("ops", "confirm")
    sid = data.sessions["aborted"] = stopped.session_id
    (call,) = await runtime.wait_for_pending(sid)
    await runtime.interrupt(sid)
    stone = (await runtime.session(sid)).completed[call["toolCallId"]]
    registered = call["deadlineAt"] - int(timeout * 1000)
    waited = stone.completed_at - registered
    data.calls.append(
        Call(sid, call["toolCallId"], "confirm", "aborted", registered, waited, waited)
    )
    return data


HERE = Path(__file__).resolve().parent


def crash_a_parked_turn(url: str, executor_id: str = EXECUTOR_ID) -> dict[str, Any]:
    """A child process (``crash_child.py``) of ``executor_id`` parks one turn on ``url`` and is
    SIGKILLed; returns what it printed of the parked turn (its ``sessionId`` among others)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.run(
        [sys.executable, str(HERE / "crash_child.py"), url, executor_id, APP_VERSION],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert child.returncode == -9, child.stderr[-2000:]
    parked: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return parked
