"""``helix-dbos sessions / inspect / fail-call / interrupt`` on real sessions (Postgres).

A runtime runs in this process with turns parked on client calls; the read commands run
in-process (they launch nothing), the write commands run as a separate ``helix-dbos`` process
against the same database, as an operator would run them, and the parked turns react.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, get_args

import psycopg
import pytest
from pydantic import BaseModel

from helix_dbos.cli import main
from helix_dbos.cli.sessions import SESSION_STATUSES
from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import Agent, define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.session import SessionStatus
from helix_dbos.core.tools import define_tool
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime
from helix_dbos.store.migrate import head_revision
from tests.support.inspect_cli import cli

from .conftest import PG_ADMIN_URL

pytestmark = pytest.mark.postgres_only

FAIL_TEXT = "the browser tab was closed"


class ColorInput(BaseModel):
    palette: str = "warm"


class ColorOutput(BaseModel):
    color: str


def _script(request: LLMRequest) -> LLMResponse:
    """``pick_color`` calls the client tool once; ``delegate`` hands that to the ``ops`` agent."""
    users = [m for m in request.messages if m.role == "user"]
    plan = users[-1].content if users else ""
    answered = [m for m in request.messages if m.role == "tool"]
    if answered:
        return reply(f"got: {answered[-1].content}")
    if plan == "delegate":
        return call(request, ("subagent__ops", {"message": "pick_color"}))
    return call(request, ("pick_color", {"palette": "warm"}))


def _agents() -> list[Agent]:
    pick = define_tool(
        "pick_color",
        "The user picks a color.",
        ColorInput,
        ColorOutput,
        execute="client",
        client_tool_timeout=60,
    )
    ops = define_agent("ops", llm=ScriptedLLM(_script), tools=[pick])
    lead = define_agent("lead", llm=ScriptedLLM(_script), subagents=[ops])
    return [ops, lead]


@pytest.fixture(autouse=True)
def _no_env_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HELIX_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
async def runtime(pg_url: str) -> AsyncIterator[AgentRuntime]:
    for handler in logging.getLogger("dbos").handlers:
        # A handler made while an earlier test's capsys was active writes to a closed file.
        stream = getattr(handler, "stream", None)
        if isinstance(handler, logging.StreamHandler) and getattr(stream, "closed", False):
            handler.setStream(sys.stderr)
    rt = AgentRuntime(
        _agents(),
        HelixSettings(
            database_url=pg_url,
            executor_id="cli-test",
            application_version="cli-test",
            heal_interval_seconds=0,  # the commands under test repair; the runtime does not
        ),
    )
    await rt.launch()
    yield rt
    await rt.shutdown()


@pytest.fixture
async def parked(runtime: AgentRuntime) -> dict[str, Any]:
    """Three sessions: one parked, one sub-agent tree parked below the root, one completed."""
    solo = await runtime.start("ops", "pick_color")
    (solo_call,) = await runtime.wait_for_pending(solo.session_id)
    tree = await runtime.start("lead", "delegate")
    (child_call,) = await runtime.wait_for_pending(tree.session_id)
    done = await runtime.start("ops", "pick_color")
    (done_call,) = await runtime.wait_for_pending(done.session_id)
    await runtime.submit_tool_result(
        done.session_id, done_call["toolCallId"], result={"color": "red"}
    )
    await runtime.wait(done.session_id)
    return {
        "solo": solo,
        "solo_call": solo_call,
        "tree": tree,
        "child_call": child_call,
        "done": done,
    }


def cli_process(*argv: str, url: str) -> subprocess.CompletedProcess[str]:
    """``helix-dbos`` as its own process, with HELIX_DATABASE_URL set."""
    env = {**os.environ, "HELIX_DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "helix_dbos.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def assert_one_line_failure(code: int, out: str, err: str, command: str) -> str:
    assert code == 2, (out, err)
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"helix-dbos {command}: ")
    return err


# -- reading -------------------------------------------------------------------------------


async def test_read_commands_on_real_sessions(pg_url: str, parked: dict[str, Any]) -> None:
    """One set of sessions (setting them up is the slow part), every read command."""
    await _sessions_lists_recent_sessions_as_a_table_and_as_json(pg_url, parked)
    await _inspect_shows_the_tree_ownership_pending_calls_and_workflow(pg_url, parked)
    await _unknown_session_and_unknown_call_fail_in_one_line(pg_url, parked)


async def _sessions_lists_recent_sessions_as_a_table_and_as_json(
    pg_url: str, parked: dict[str, Any]
) -> None:
    code, out, err = await cli("sessions", "--database-url", pg_url)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["SESSION", "AGENT", "STATUS", "RUN", "PENDING", "UPDATED"]
    assert len(lines) == 1 + 4  # solo, the tree's root and child, the completed one
    by_id = {line.split()[0]: line.split() for line in lines[1:]}
    assert by_id[parked["solo"].session_id][1:3] == ["ops", "suspended_client_tool"]
    assert by_id[parked["solo"].session_id][4] == "1"
    assert by_id[parked["done"].session_id][1:3] == ["ops", "completed"]

    code, out, _ = await cli(
        "sessions", "--database-url", pg_url, "--json", "--status", "suspended_client_tool"
    )
    rows = json.loads(out)
    assert code == 0
    assert {r["sessionId"] for r in rows} == {
        parked["solo"].session_id,
        parked["child_call"]["ownerSessionId"],
    }
    assert all(r["status"] == "suspended_client_tool" and r["pendingCalls"] == 1 for r in rows)

    code, out, _ = await cli("sessions", "--database-url", pg_url, "--json", "--agent", "lead")
    assert [r["sessionId"] for r in json.loads(out)] == [parked["tree"].session_id]
    code, out, _ = await cli("sessions", "--database-url", pg_url, "--json", "--limit", "1")
    (newest,) = json.loads(out)
    assert newest["sessionId"] == parked["done"].session_id  # the last one updated


async def _inspect_shows_the_tree_ownership_pending_calls_and_workflow(
    pg_url: str, parked: dict[str, Any]
) -> None:
    root = parked["tree"].session_id
    child_call = parked["child_call"]
    child = child_call["ownerSessionId"]
    code, out, err = await cli("inspect", root, "--database-url", pg_url, "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["sessionId"] == root and report["agentType"] == "lead"
    assert report["workflow"]["status"] == "PENDING"
    assert report["workflow"]["executorId"] == "cli-test"
    assert report["ownership"] == {child_call["toolCallId"]: child}
    (pending,) = report["pendingToolCalls"]
    assert pending["toolCallId"] == child_call["toolCallId"]
    assert pending["ownerSessionId"] == child
    assert pending["deadlineAt"] == child_call["deadlineAt"]
    assert 0 < pending["remainingMs"] <= 60_000
    assert report["tree"]["sessionId"] == root
    (sub,) = report["tree"]["children"]
    assert sub["sessionId"] == child and sub["workflowStatus"] == "PENDING"
    assert sub["pendingToolCallIds"] == [child_call["toolCallId"]]
    assert [m["role"] for m in report["messages"]] == ["user", "assistant"]

    code, out, _ = await cli("inspect", root, "--database-url", pg_url)
    assert code == 0
    assert "status    running" in out
    assert "workflow  helix:" in out and "PENDING" in out
    assert "pending calls (1)" in out and f"{child_call['toolCallId']}  pick_color" in out
    assert f"  {child_call['toolCallId']} -> {child}" in out
    assert f"└── {child}  ops  suspended_client_tool  [PENDING]" in out

    # A completed session: tombstones, the messages, a finished workflow.
    code, out, _ = await cli(
        "inspect", parked["done"].session_id, "--json", "--database-url", pg_url, "--messages", "2"
    )
    done = json.loads(out)
    assert done["status"] == "completed" and done["workflow"]["status"] == "SUCCESS"
    assert done["pendingToolCalls"] == [] and done["ownership"] == {}
    assert [t["outcome"] for t in done["tombstones"].values()] == ["answered"]
    assert done["messageCount"] == 4
    assert [m["role"] for m in done["messages"]] == ["tool", "assistant"]


# -- acting from another process ---------------------------------------------------------


async def test_fail_call_and_interrupt_from_other_processes(
    runtime: AgentRuntime, pg_url: str, parked: dict[str, Any]
) -> None:
    """``fail-call`` completes one parked turn and ``interrupt`` stops a parked tree, each
    from its own ``helix-dbos`` process while this process's runtime holds the turns."""
    sid = parked["solo"].session_id
    tcid = parked["solo_call"]["toolCallId"]
    root = parked["tree"].session_id
    child = parked["child_call"]["ownerSessionId"]
    failed, stopped, unknown = await asyncio.gather(
        asyncio.to_thread(
            cli_process, "fail-call", sid, tcid, "--error", FAIL_TEXT, "--json", url=pg_url
        ),
        asyncio.to_thread(cli_process, "interrupt", root, url=pg_url),
        asyncio.to_thread(cli_process, "fail-call", root, "call_nope", url=pg_url),
    )
    # A refused call: exit 2 and one line, even though the submit logged a warning (a real
    # process has no log handler; the CLI keeps the runtime's events off its stderr).
    err = assert_one_line_failure(unknown.returncode, unknown.stdout, unknown.stderr, "fail-call")
    assert "no pending call 'call_nope'" in err

    # fail-call: accepted, and the parked turn wakes, the model reads the error, it completes.
    assert failed.returncode == 0, failed.stderr
    answer = json.loads(failed.stdout)
    assert answer == {
        "sessionId": sid,
        "status": "accepted",
        "toolCallId": tcid,
        "continuation": answer["continuation"],
        "liveExecutors": 1,  # this process's runtime: the turn continues now
    }
    view = await runtime.wait(sid, timeout=10)
    assert view["status"] == "completed"
    tool = [m for m in await runtime.messages(sid) if m.role == "tool"]
    assert [(m.is_error, m.content) for m in tool] == [(True, FAIL_TEXT)]

    # interrupt: the root and its sub-agent, with the runtime's own cleanup: ownership gone,
    # a stopped tombstone, the abort counted, both workflows cancelled.
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == f"interrupted {root} (was running)"
    assert (await runtime.session(root)).status == "interrupted"
    assert (await runtime.session(child)).status == "interrupted"
    state = await runtime.session(root)
    assert state.ownership == {}
    assert state.completed[parked["child_call"]["toolCallId"]].outcome == "stopped"
    late = await runtime.submit_tool_result(
        root, parked["child_call"]["toolCallId"], result={"color": "red"}
    )
    assert (late.status, late.reason) == ("unknown_tool_call", "run_stopped")
    with psycopg.connect(pg_url) as conn:
        statuses: dict[str, str] = dict(
            conn.execute(
                "SELECT w.workflow_uuid, w.status FROM dbos.workflow_status w"
                " JOIN __agents_states s ON s.workflow_id = w.workflow_uuid"
                " WHERE s.root_session_id = %s",
                (root,),
            ).fetchall()
        )
        aborts = conn.execute(
            "SELECT count(*) FROM __agents_usage WHERE source_type = 'client_tool_abort'"
            " AND session_id = %s",
            (child,),
        ).fetchone()
    assert set(statuses.values()) == {"CANCELLED"} and len(statuses) == 2
    assert aborts == (1,)

    # Both again (in this process this time): nothing left to do, one line, exit 0.
    code, out, _ = await cli("fail-call", sid, tcid, "--database-url", pg_url)
    assert code == 0 and "already had an answer" in out
    code, out, _ = await cli("interrupt", root, "--json", "--database-url", pg_url)
    assert code == 0
    assert json.loads(out) == {
        "sessionId": root,
        "status": "interrupted",
        "previousStatus": "interrupted",
    }


# -- failures: one line, exit code 2 -------------------------------------------------------


async def _unknown_session_and_unknown_call_fail_in_one_line(
    pg_url: str, parked: dict[str, Any]
) -> None:
    for command in (
        ["inspect", "ses_missing"],
        ["interrupt", "ses_missing"],
        ["fail-call", "ses_missing", "call_1"],
    ):
        err = assert_one_line_failure(*await cli(*command, "--database-url", pg_url), command[0])
        assert "ses_missing" in err
    err = assert_one_line_failure(
        *await cli("fail-call", parked["solo"].session_id, "call_nope", "--database-url", pg_url),
        "fail-call",
    )
    assert "no pending call 'call_nope'" in err


@pytest.fixture
def empty_pg() -> Iterator[str]:
    name = f"helix_cli_empty_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_missing_migration_names_the_migrate_command(
    capsys: pytest.CaptureFixture[str], empty_pg: str
) -> None:
    for command in (
        ["sessions"],
        ["inspect", "ses_1"],
        ["fail-call", "ses_1", "call_1"],
        ["interrupt", "ses_1"],
    ):
        code = main([*command, "--database-url", empty_pg])
        err = assert_one_line_failure(code, *capsys.readouterr(), command[0])
        assert "helix-dbos migrate" in err and head_revision() in err


def test_bad_urls_fail_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cases = {
        "mysql://db/x": "Unsupported database URL scheme",
        "postgresql://postgres@127.0.0.1:1/nowhere": "cannot use the database",
        f"sqlite:///{tmp_path / 'absent.sqlite'}": "no SQLite database",
    }
    for url, expected in cases.items():
        err = assert_one_line_failure(
            main(["sessions", "--database-url", url]), *capsys.readouterr(), "sessions"
        )
        assert expected in err, err


def test_an_unknown_status_is_refused_with_the_valid_values(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--status bogus`` is a usage error (exit 2) listing the statuses, before any database
    is opened; the CLI's list is the session model's."""
    code = main(["sessions", "--status", "bogus", "--database-url", f"sqlite:///{tmp_path}/x"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "invalid choice: 'bogus'" in err
    for status in get_args(SessionStatus):
        assert status in err
    assert get_args(SessionStatus) == SESSION_STATUSES


def test_a_real_process_reads_the_url_from_the_environment_and_exits_2(empty_pg: str) -> None:
    done = cli_process("sessions", url=empty_pg)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("helix-dbos sessions: ") and "Traceback" not in done.stderr
    assert "helix-dbos migrate" in done.stderr


# -- heal ----------------------------------------------------------------------------------


async def test_heal_repairs_a_cancelled_turn_once_from_another_process(
    runtime: AgentRuntime, pg_url: str, parked: dict[str, Any]
) -> None:
    """A parked turn's workflow cancelled behind the runtime's back: ``helix-dbos heal`` ends
    the session ``interrupted`` (one line per repair, or JSON), and a second run finds nothing."""
    from dbos import DBOS

    sid = parked["solo"].session_id
    await DBOS.cancel_workflow_async((await runtime.session(sid)).workflow_id or "")
    first = await asyncio.to_thread(cli_process, "heal", "--grace", "0", "--json", url=pg_url)
    assert first.returncode == 0, first.stderr
    repairs = json.loads(first.stdout)
    assert [(r["sessionId"], r["action"], r["workflowStatus"]) for r in repairs] == [
        (sid, "ended_cancelled", "CANCELLED")
    ]
    assert (await runtime.session(sid)).status == "interrupted"
    again = await asyncio.to_thread(cli_process, "heal", "--grace", "0", url=pg_url)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "nothing to repair"
