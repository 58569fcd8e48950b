"""The startup line of a launch (what runs, what it recovered, what its first sweep adopted),
and the reasons of refusals in the log (a result that failed its schema, a 400 answer), on
real DBOS and Postgres."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from helix_dbos import __version__
from helix_dbos.errors import InvalidResultError
from helix_dbos.http.app import create_app
from helix_dbos.store.migrate import head_revision
from helix_dbos.testing import capture_log_events
from tests.observability.obs_helpers import APP_VERSION, EXECUTOR_ID, crash_a_parked_turn, one_event

pytestmark = pytest.mark.postgres_only

HERE = Path(__file__).resolve().parent


async def test_runtime_started_names_what_was_launched(launch: Any, pg_url: str) -> None:
    """One INFO line: the database (password masked), the agents, the revision, the
    executor, the versions and the recovered turns; ``runtime.startup`` holds the same."""
    with_password = pg_url.replace("postgres@", "postgres:hunter2@", 1)
    assert with_password != pg_url  # trust auth: the password is accepted and ignored
    with capture_log_events() as events:
        runtime = await launch(database_url=with_password)
    started = one_event(events, "runtime.started")
    assert "hunter2" not in json.dumps(started)
    assert started == {
        "event": "runtime.started",
        "level": "INFO",
        "database": with_password.replace("hunter2", "***"),
        "agents": [agent.name for agent in runtime.registry],
        "migrationRevision": head_revision(),
        "executorId": EXECUTOR_ID,
        "applicationVersion": APP_VERSION,
        "version": __version__,
        "recovered": 0,
        "adopted": 0,
    }
    assert runtime.startup is not None
    assert runtime.startup.dump() == {
        k: v for k, v in started.items() if k not in ("event", "level")
    }


async def test_a_relaunch_counts_the_parked_turns_it_recovers(launch: Any, pg_url: str) -> None:
    """The same executor id after a crash: ``recovered`` is the turn DBOS recovers, and the
    turn does come back (it parks again on its call)."""
    parked = crash_a_parked_turn(pg_url, EXECUTOR_ID)
    with capture_log_events() as events:
        runtime = await launch()
    started = one_event(events, "runtime.started")
    assert (started["recovered"], started["adopted"]) == (1, 0)
    (pending,) = await runtime.wait_for_pending(parked["sessionId"], timeout=20)
    assert pending["toolCallId"] == parked["toolCallId"]
    await runtime.interrupt(parked["sessionId"])


def _wait_dead(url: str, executor_id: str, seconds: float) -> None:
    """Until the executor's last heartbeat is ``seconds`` old (it is dead to the fleet)."""
    deadline = time.monotonic() + 30
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT now() - heartbeat_at > make_interval(secs => %s) "
                "FROM __agents_executors WHERE executor_id = %s",
                (seconds, executor_id),
            ).fetchone()
            if row is not None and row[0]:
                return
            assert time.monotonic() < deadline, "the crashed executor still looks alive"
            time.sleep(0.1)


async def test_the_startup_line_counts_the_turns_the_first_sweep_adopts(
    launch: Any, pg_url: str
) -> None:
    """Another executor's parked turn, its process dead: this launch recovers nothing of its
    own (``recovered=0``) and its first sweep adopts the turn (``adopted=1``)."""
    parked = crash_a_parked_turn(pg_url, "obs-dead")
    _wait_dead(pg_url, "obs-dead", 1.5)
    with capture_log_events() as events:
        runtime = await launch(heartbeat_seconds=0.5, adopt_after_seconds=1.0)
    started = one_event(events, "runtime.started")
    assert (started["recovered"], started["adopted"]) == (0, 1)
    adopted = one_event(events, "fleet.adopted")
    assert adopted["fromExecutor"] == "obs-dead" and adopted["count"] == 1
    (pending,) = await runtime.wait_for_pending(parked["sessionId"], timeout=20)
    assert pending["toolCallId"] == parked["toolCallId"]
    await runtime.interrupt(parked["sessionId"])


async def test_a_result_that_fails_its_schema_logs_why_not_what(launch: Any) -> None:
    """``client_tool.validation_failed`` has the error code and where and why the result
    failed; the submitted value is not in the line."""
    runtime = await launch()
    handle = await runtime.start("ops", "pick_color")
    (pending,) = await runtime.wait_for_pending(handle.session_id)
    with capture_log_events() as events, pytest.raises(InvalidResultError):
        await runtime.submit_tool_result(
            handle.session_id, pending["toolCallId"], result={"colour": "private-value-42"}
        )
    failed = one_event(events, "client_tool.validation_failed")
    assert failed["code"] == "INVALID_RESULT"
    assert failed["error"] == "color: Field required"
    assert "private-value-42" not in json.dumps(failed)
    await runtime.interrupt(handle.session_id)


async def test_every_400_answer_logs_its_cause_without_the_body(launch: Any) -> None:
    """A body that fails its schema, a result that fails its tool's schema, a bad query: one
    ``server.bad_request`` line each with the code, the message and where it failed; the
    submitted values are never logged."""
    runtime = await launch()
    handle = await runtime.start("ops", "pick_color")
    (pending,) = await runtime.wait_for_pending(handle.session_id)
    app = create_app(runtime, allow_unauthenticated=True)
    with capture_log_events() as events:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://helix"
        ) as client:
            no_message = await client.post(
                "/start", json={"agentType": "ops", "mesage": "secret-1"}
            )
            bad_result = await client.post(
                "/submit-tool-result",
                json={
                    "sessionId": handle.session_id,
                    "toolCallId": pending["toolCallId"],
                    "result": {"colour": "secret-2"},
                },
            )
            bad_query = await client.get("/sse", params={"sessionId": "ses_1", "fromSequence": -1})
    assert [r.status_code for r in (no_message, bad_result, bad_query)] == [400, 400, 400]
    lines = [e for e in events if e["event"] == "server.bad_request"]
    assert [(e["level"], e["method"], e["path"], e["code"]) for e in lines] == [
        ("INFO", "POST", "/start", "validation_error"),
        ("INFO", "POST", "/submit-tool-result", "INVALID_RESULT"),
        ("INFO", "GET", "/sse", "validation_error"),
    ]
    assert [e["error"] for e in lines] == [r.json()["error"] for r in (no_message, bad_result)] + [
        bad_query.json()["error"]
    ]
    assert lines[0]["cause"] == "schema"
    assert lines[0]["issues"].startswith("message: Field required")
    assert lines[1]["issues"] == "color: Field required"
    assert lines[1]["toolCallId"] == pending["toolCallId"]
    assert lines[2]["cause"] == "query" and lines[2]["issues"].startswith("query.fromSequence: ")
    assert "secret-" not in json.dumps(events)
    await runtime.interrupt(handle.session_id)
