"""Who may start a batch's job (ARCHITECTURE.md, rule 20): the submit that completes a batch
of client calls of a turn parked in its process starts it, on Postgres; never for a batch
with an approval (an approved tool is a DBOS step, which runs only in its workflow), never on
SQLite (one writer at a time). ``BatchJobs.start`` says whether it started one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime._handover import BatchJobs
from tests.runtime.agents import editor_agent
from tests.runtime.conftest import MakeRuntime
from tests.support.asker import inside_recv
from tests.support.bank import Bank, banker, script


def _starts(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each ``BatchJobs.start`` (a submit that completed a batch) started a job."""
    started: list[bool] = []
    original = BatchJobs.start

    def start(jobs: BatchJobs, live_workflow_id: str, job_of: Callable[..., Any]) -> bool:
        did = original(jobs, live_workflow_id, job_of)
        started.append(did)
        return did

    monkeypatch.setattr(BatchJobs, "start", start)
    return started


async def test_a_submit_starts_the_job_of_a_client_batch_on_postgres_only(
    make_runtime: MakeRuntime, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same client batch: on Postgres the submit completing it starts its job; on SQLite
    the woken turn runs it."""
    started = _starts(monkeypatch)
    rt = await make_runtime([editor_agent()])
    handle = await rt.start("editor", "1 edit")
    [call] = await rt.wait_for_pending(handle.session_id)
    await inside_recv(rt, handle.workflow_id or "")
    await rt.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
    assert (await rt.wait(handle.session_id))["status"] == "completed"
    assert started == [rt.store.dialect == "postgresql"]


async def test_a_submit_starts_no_job_for_a_batch_with_an_approval(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An approval completes its batch: the turn, woken, runs the approved tool and the job."""
    started = _starts(monkeypatch)
    bank = Bank()
    rt = await make_runtime([banker(bank, ScriptedLLM(script))])
    handle = await rt.start("banker", "pay")
    [call] = await rt.wait_for_pending(handle.session_id)
    await inside_recv(rt, handle.workflow_id or "")
    await rt.submit_tool_result(
        handle.session_id,
        call["toolCallId"],
        kind="approval-response",
        approval_id=call["approvalId"],
        approved=True,
    )
    assert (await rt.wait(handle.session_id))["status"] == "completed"
    assert len(bank.runs) == 1
    assert started == [False]
