"""The in-process registry of batch jobs (``handover.BatchJobs``): a batch's job runs once
per process whoever asks for it first, the submit or the woken turn.

Invariant (ARCHITECTURE.md, rule 20): a parked turn is never called into; a submit starts the
job of the batch the turn published (a value), and the turn joins the job by its slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from helix_dbos.runtime._handover import BatchJobs, Continued, ParkedBatch, ReadLost
from helix_dbos.runtime.records import PlanItem


def _batch(step: int = 1, live: str = "wf") -> ParkedBatch:
    plan: list[PlanItem] = [{"toolCallId": "c1", "toolName": "edit", "kind": "client"}]  # type: ignore[typeddict-item]
    return ParkedBatch(
        workflow_id="wf",
        live_workflow_id=live,
        session_id="s",
        root_session_id="s",
        agent_type="editor",
        run_id="r",
        step=step,
        plan=plan,
        results={},
        summary={"steps": 1, "clientCalls": 1, "waitMs": 0, "inputTokens": 0, "outputTokens": 0},
    )


class _Jobs:
    """A job function that records who ran it and what it was run for."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.ran: list[tuple[str, int]] = []
        self.fail = fail
        self.release = asyncio.Event()
        self.release.set()

    def of(self, who: str) -> Any:
        def job_of(batch: ParkedBatch) -> Coroutine[Any, Any, Continued]:
            return self._run(who, batch)

        return job_of

    async def _run(self, who: str, batch: ParkedBatch) -> Continued:
        self.ran.append((who, batch.step))
        await self.release.wait()
        if self.fail is not None and who == "submit":
            raise self.fail
        return Continued({"results": [], "stashedMessage": False}, None)


async def test_the_turn_joins_the_job_a_submit_started_for_its_batch() -> None:
    jobs, work = BatchJobs(), _Jobs()
    jobs.publish(_batch())
    assert jobs.start("wf", work.of("submit"))
    assert not jobs.start("wf", work.of("submit"))  # a second submit starts nothing
    await jobs.run(_batch(), work.of("turn"))
    assert work.ran == [("submit", 1)]


async def test_a_withdrawn_batch_starts_nothing_and_the_turn_runs_its_own_job() -> None:
    jobs, work = BatchJobs(), _Jobs()
    jobs.publish(_batch())
    jobs.withdraw("wf")
    assert not jobs.start("wf", work.of("submit"))
    await jobs.run(_batch(), work.of("turn"))
    assert work.ran == [("turn", 1)]


async def test_a_job_of_another_batch_is_not_joined() -> None:
    """A job keyed to an earlier step's slot is let go; the turn runs the job of its own."""
    jobs, work = BatchJobs(), _Jobs()
    jobs.publish(_batch(step=1))
    jobs.start("wf", work.of("submit"))
    await asyncio.sleep(0)  # the submit's job is under way
    await jobs.run(_batch(step=2), work.of("turn"))
    assert work.ran == [("submit", 1), ("turn", 2)]


async def test_a_job_whose_read_failed_is_run_again_by_the_turn() -> None:
    jobs, work = BatchJobs(), _Jobs(fail=ReadLost())
    jobs.publish(_batch())
    jobs.start("wf", work.of("submit"))
    await jobs.run(_batch(), work.of("turn"))
    assert work.ran == [("submit", 1), ("turn", 1)]


async def test_a_job_whose_commit_failed_fails_the_turn_that_joins_it() -> None:
    """The results commit raised (after its own retries): the turn fails with that error
    rather than spend a second round of retries on it."""
    jobs, work = BatchJobs(), _Jobs(fail=RuntimeError("commit failed"))
    jobs.publish(_batch())
    jobs.start("wf", work.of("submit"))
    with pytest.raises(RuntimeError, match="commit failed"):
        await jobs.run(_batch(), work.of("turn"))
    assert work.ran == [("submit", 1)]


async def test_a_job_nobody_joins_finishes_before_shutdown_and_its_next_step_stops() -> None:
    """A job a submit started for a turn that will not join it (the turn ended, or the
    process shuts down) is not cancelled mid-flight: a commit cancelled inside its
    transaction could leave its connection holding a lock (on SQLite, every later commit
    then failed with "database is locked"). The shutdown waits for it; the next model step
    it started is stopped once it is known."""
    jobs = BatchJobs()
    release = asyncio.Event()
    finished: list[str] = []
    next_step = asyncio.ensure_future(asyncio.sleep(60))

    async def slow(batch: ParkedBatch) -> Continued:
        await release.wait()  # the commit, in its transaction
        finished.append("commit")
        return Continued({"results": [], "stashedMessage": False}, next_step)

    jobs.publish(_batch())
    jobs.start("wf", slow)
    jobs.forget("wf")  # the turn ended before it joined the job
    closing = asyncio.ensure_future(jobs.close_all(5))
    await asyncio.sleep(0.05)
    assert not closing.done()  # the shutdown waits for the commit in flight
    release.set()
    await closing
    assert finished == ["commit"]
    await asyncio.sleep(0)
    assert next_step.cancelled()


async def test_a_job_stuck_at_shutdown_is_cancelled_after_the_wait() -> None:
    """A job stuck on a dead database does not hold the shutdown: it is cancelled once the
    wait is over."""
    jobs = BatchJobs()
    started: list[asyncio.Task[Any]] = []

    async def stuck(batch: ParkedBatch) -> Continued:
        started.append(asyncio.current_task())  # type: ignore[arg-type]
        await asyncio.sleep(60)
        raise AssertionError("never")

    jobs.publish(_batch())
    jobs.start("wf", stuck)
    await asyncio.sleep(0)
    await jobs.close_all(0.05)
    await asyncio.sleep(0)
    assert started[0].cancelled()
