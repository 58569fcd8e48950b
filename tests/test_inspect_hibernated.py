"""``helix-dbos inspect`` and ``sessions`` on hibernated turns (real turns; Postgres and SQLite).

A runtime runs in this process with its deadline keeper off, so nothing continues a
hibernated turn unless the test does: ``cold`` turns hibernate at once, a ``hot`` turn stays a
live workflow, a ``quick`` turn's deadline lapses while it is hibernated. The read commands run
in-process (they launch nothing). ``fail-call`` from the CLI answers a hibernated call: the CLI
has no agents and starts no workflow, so the turn is due now until the runtime's keeper starts
its continuation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import Agent, define_agent
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.core.tools import define_tool
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime, names
from helix_dbos.runtime._hibernated.keeper import keep_once
from tests.runtime.hibernation_worker import hibernated, workflow_result
from tests.support.inspect_cli import cli

#: Seconds a ``quick`` call waits: its turn must hibernate before then (a slow machine too).
QUICK_TIMEOUT = 3.0


class ColorInput(BaseModel):
    palette: str = "warm"


class ColorOutput(BaseModel):
    color: str


def _script(request: LLMRequest) -> LLMResponse:
    """Call ``pick_color`` once, then reply with what it answered."""
    answered = [m for m in request.messages if m.role == "tool"]
    if answered:
        return reply(f"got: {answered[-1].error_code or answered[-1].content}")
    return call(request, ("pick_color", {"palette": "warm"}))


def _agents() -> list[Agent]:
    pick = define_tool(
        "pick_color", "The user picks a color.", ColorInput, ColorOutput, execute="client"
    )
    quick = define_tool(
        "pick_color",
        "The user picks a color, quickly.",
        ColorInput,
        ColorOutput,
        execute="client",
        client_tool_timeout=QUICK_TIMEOUT,
    )

    def agent(name: str, window: float | str, tool: Any = pick) -> Agent:
        return define_agent(
            name,
            llm=ScriptedLLM(_script),
            tools=[tool],
            client_tool_timeout=60,
            hibernate_after=window,  # type: ignore[arg-type]
        )

    return [agent("cold", 0), agent("hot", "never"), agent("quick", 0, quick)]


@pytest.fixture(autouse=True)
def _no_env_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HELIX_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
async def runtime(db_url: str) -> AsyncIterator[AgentRuntime]:
    for handler in logging.getLogger("dbos").handlers:
        # A handler made while an earlier test's capsys was active writes to a closed file.
        stream = getattr(handler, "stream", None)
        if isinstance(handler, logging.StreamHandler) and getattr(stream, "closed", False):
            handler.setStream(sys.stderr)
    rt = AgentRuntime(
        _agents(),
        HelixSettings(
            database_url=db_url,
            executor_id="inspect-cold",
            application_version="inspect-cold",
            deadline_keeper_seconds=0,  # nothing continues a turn behind the test's back
        ),
    )
    await rt.launch()
    yield rt
    await rt.shutdown()


def iso(ms: int) -> str:
    """An epoch-ms time as the CLI writes it."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


async def test_inspect_and_sessions_show_hibernated_turns(
    runtime: AgentRuntime, db_url: str
) -> None:
    """One set of turns (setting them up is the slow part), every read of them."""
    url = ("--database-url", db_url)
    quick = await runtime.start("quick", "pick")
    cold = await runtime.start("cold", "pick")
    hot = await runtime.start("hot", "pick")
    await runtime.wait_for_pending(hot.session_id)
    mark = await hibernated(runtime, cold.session_id)
    await hibernated(runtime, quick.session_id)
    # The workflow returns just after its hibernate commit: wait for its end, as recorded.
    assert (await workflow_result(cold.workflow_id))["outcome"] == "hibernated"
    (call_,) = (await runtime.session(cold.session_id)).pending.values()
    continuation = names.continuation_workflow_id(cold.session_id, cold.run_id)

    # -- inspect: a hibernated turn, not due ---------------------------------------------------
    code, out, err = await cli("inspect", cold.session_id, "--json", *url)
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["status"] == "suspended_client_tool"
    assert report["hibernated"] == {
        "at": iso(mark["at"]),
        "dueAt": iso(call_.deadline_at),
        "due": False,
        "waitingOnSubAgentCall": None,
        "step": 0,
        "workflowId": cold.workflow_id,
        "continuationWorkflowId": continuation,
        "continuationStatus": None,
    }
    assert mark["dueAt"] == call_.deadline_at
    # Its first workflow ended (outcome "hibernated"); its calls still wait on the row.
    assert report["workflow"]["status"] == "SUCCESS"
    assert [p["toolCallId"] for p in report["pendingToolCalls"]] == [call_.tool_call_id]
    assert report["tree"]["hibernated"] is True

    code, out, _ = await cli("inspect", cold.session_id, *url)
    assert code == 0
    assert f"hibernated since {iso(mark['at'])}, due {iso(call_.deadline_at)} (in " in out
    assert f"continues {continuation}  not started" in out
    assert f"{cold.session_id}  cold  suspended_client_tool  [hibernated]" in out

    # -- a hibernated turn whose deadline lapsed, the keeper off: overdue ------------------------
    quick_state = await runtime.session(quick.session_id)
    (quick_call,) = quick_state.pending.values()
    while datetime.now(UTC).timestamp() * 1000 <= quick_call.deadline_at:
        await asyncio.sleep(0.05)
    code, out, _ = await cli("inspect", quick.session_id, "--json", *url)
    assert json.loads(out)["hibernated"]["due"] is True
    assert json.loads(out)["hibernated"]["dueAt"] == iso(quick_call.deadline_at)
    code, out, _ = await cli("inspect", quick.session_id, *url)
    assert f", due {iso(quick_call.deadline_at)} (overdue " in out

    # -- a turn parked live: nothing hibernated --------------------------------------------------
    code, out, _ = await cli("inspect", hot.session_id, "--json", *url)
    live = json.loads(out)
    assert live["hibernated"] is None and live["tree"]["hibernated"] is False
    assert live["workflow"]["status"] == "PENDING"
    code, out, _ = await cli("inspect", hot.session_id, *url)
    assert "hibernated" not in out and "suspended_client_tool  [PENDING]" in out

    # -- sessions: the hibernated ones marked --------------------------------------------------
    code, out, err = await cli("sessions", *url)
    assert (code, err) == (0, "")
    by_id = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert by_id[cold.session_id][2] == "suspended_client_tool(hibernated)"
    assert by_id[quick.session_id][2] == "suspended_client_tool(hibernated)"
    assert by_id[hot.session_id][2] == "suspended_client_tool"
    code, out, _ = await cli("sessions", "--json", *url)
    rows = {r["sessionId"]: r for r in json.loads(out)}
    assert rows[cold.session_id]["hibernated"] == report["hibernated"]
    assert rows[hot.session_id]["hibernated"] is None

    # -- answered from the CLI: due now, its continuation not started --------------------------
    code, out, err = await cli(
        "fail-call", cold.session_id, call_.tool_call_id, "--json", "--error", "closed", *url
    )
    assert code == 0, err
    assert json.loads(out)["continuation"]["kind"] == "new_run"
    code, out, _ = await cli("inspect", cold.session_id, "--json", *url)
    due = json.loads(out)["hibernated"]
    assert (due["dueAt"], due["due"], due["continuationStatus"]) == (None, True, None)
    code, out, _ = await cli("inspect", cold.session_id, *url)
    assert f"hibernated since {iso(mark['at'])}, due now (its batch is complete" in out

    # -- the keeper starts the continuation; the turn ends, nothing hibernated -------------------
    assert await keep_once(runtime.ctx) >= 1
    assert (await runtime.wait(cold.session_id, timeout=30))["status"] == "completed"
    # The session ends in the continuation's last commit; DBOS records the workflow's end
    # just after it: wait for that, as recorded.
    await workflow_result(continuation)
    code, out, _ = await cli("inspect", cold.session_id, "--json", *url)
    done = json.loads(out)
    assert done["hibernated"] is None and done["tree"]["hibernated"] is False
    assert done["workflow"]["workflowId"] == continuation
    assert done["workflow"]["status"] == "SUCCESS"
    code, out, _ = await cli("inspect", cold.session_id, *url)
    assert "hibernated since" not in out and f"workflow  {continuation}  SUCCESS" in out

    await runtime.interrupt(hot.session_id)
