"""Turns of a contract version nothing alive runs: reported at launch, answered honestly, and
moved forward by the documented command (one process, two releases in turn, each on its own
event loop: a stopped DBOS leaves its loop's thread pool shut down)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys

import pytest

from helix_dbos.config import HelixSettings
from helix_dbos.demo import demo_agents
from helix_dbos.runtime import AgentRuntime

RESULT = {"applied": 1, "failed": 0}


def _settings(url: str, **values: object) -> HelixSettings:
    return HelixSettings(database_url=url, heartbeat_seconds=0.5, adopt_after_seconds=2, **values)  # type: ignore[arg-type]


async def _park_and_stop(settings: HelixSettings) -> tuple[str, str]:
    """A release that parks one turn and stops cleanly: (session, call)."""
    runtime = AgentRuntime(demo_agents(), settings)
    await runtime.launch()
    try:
        handle = await runtime.start("editor", "replace 'a' with 'b'")
        call = (await runtime.wait_for_pending(handle.session_id))[0]["toolCallId"]
    finally:
        await runtime.shutdown()
    return handle.session_id, str(call)


def test_a_stranded_turn_is_reported_refused_honestly_and_moved_forward(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Release "old" parks a turn and stops. The next release (another contract, which does
    not list "old" as replayable) logs the stranded turn at launch, and a submit to it answers
    ``caller_resumes``, not ``new_run``. After `helix-dbos executors --forward old`, the live
    release adopts the turn and it completes once."""
    sid, call = asyncio.run(_park_and_stop(_settings(pg_url, application_version="old")))
    caplog.set_level(logging.INFO, logger="helix_dbos")
    asyncio.run(_next_release(pg_url, sid, call, caplog))


async def _next_release(pg_url: str, sid: str, call: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="helix_dbos")
    new = AgentRuntime(
        demo_agents(), _settings(pg_url, application_version="new", forward_versions=frozenset())
    )
    await new.launch()
    try:
        assert new.fleet is not None
        await new.fleet.sweep()
        stranded = [r for r in caplog.records if r.getMessage() == "fleet.turns_stranded"]
        assert stranded and stranded[0].__dict__["applicationVersion"] == "old"
        assert stranded[0].__dict__["command"] == "helix-dbos executors --forward old"

        answer = await new.submit_tool_result(sid, call, result=RESULT)
        assert answer.status == "accepted"
        assert answer.continuation is not None
        assert answer.continuation.kind == "caller_resumes"

        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "helix_dbos.cli",
                "executors",
                "--json",
                "--forward",
                "old",
                "--database-url",
                pg_url,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={"HELIX_APP_VERSION": "new", "PATH": ""},
        )
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert len(report["forwarded"]) == 1
        assert report["pendingTurnsByVersion"] == {"new": 1}
        view = await new.wait(sid, timeout=60)
        assert view["status"] == "completed"
        roles = [m.role for m in await new.messages(sid)]
        assert roles == ["user", "assistant", "tool", "assistant"]
    finally:
        await new.shutdown()


def test_a_dead_executors_turn_is_adopted_by_the_submit(pg_url: str) -> None:
    """A submit for a turn whose executor is gone (stopped, not yet swept) adopts it on the
    spot: the answer's new_run is kept."""
    sid, call = asyncio.run(_park_and_stop(_settings(pg_url, executor_id="first")))
    asyncio.run(_survivor(pg_url, sid, call))


async def _survivor(pg_url: str, sid: str, call: str) -> None:
    # A survivor whose own sweep would not come round for a long time.
    survivor = AgentRuntime(
        demo_agents(),
        HelixSettings(
            database_url=pg_url,
            executor_id="second",
            heartbeat_seconds=300,
            adopt_after_seconds=600,
        ),
    )
    await survivor.launch()
    try:
        assert survivor.fleet is not None
        survivor.fleet._live = {}
        answer = await survivor.submit_tool_result(sid, call, result=RESULT)
        assert answer.continuation is not None and answer.continuation.kind == "new_run"
        view = await survivor.wait(sid, timeout=60)
        assert view["status"] == "completed"
    finally:
        await survivor.shutdown()
