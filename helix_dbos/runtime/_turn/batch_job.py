"""Continuing a batch: one job, whoever runs it.

When a turn's batch of tool calls stops waiting (every call answered or lapsed, an abandoning
message, or no call waited at all), the turn goes on with one job (``continue_batch``): the
batch's results commit, then, if the turn goes on, its next model step, started from the row
and the conversation that commit wrote. The job starts from a ``ParkedBatch``, a value: the
step, its plan, the results known before the park and the running totals, which the turn
holds as it parks (or its hibernation record holds, ``_turn/hibernation.py``), plus the session's
row and conversation as recorded. Both of its parts are exactly-once commits under the turn's
checkpoint slots (``_commits/once.py``), so whoever runs the job, once or twice, commits each once.

Three runners:

* the parked turn, woken by its wake-up (``turn._Turn._settle``);
* the submit that completes a batch of client calls of a turn parked in its process, at once,
  while DBOS is still handing the turn its wake-up (``BatchJobs.start``): the early
  continuation, which saves the wake-up's latency;
* the continuation workflow of a hibernated turn (``_hibernated/continuation.py``), through the turn's
  own ``_settle``.

In one process a batch's job runs once: the turn publishes its batch as it parks
(``BatchJobs.publish``), a submit starts the job from that value, and the turn, once woken,
joins the job running for its batch's slot instead of starting a second one
(``BatchJobs.run``), so the model is not called twice for one step. Nobody calls into a parked
turn: the submit runs a job from a value, and the turn takes the job's product by its slot.

Only a batch of client calls on Postgres is published: an approved call's tool runs inside
the workflow (a DBOS step), and SQLite takes one writer at a time, so an early commit would
only contend with DBOS's consume of the wake-up.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, cast

from ...core.agents import Agent
from ...store import patience
from .. import names
from .._commits.once import FENCED, CommitContext
from .._context import current
from .._handover import Continued, ParkedBatch, ReadLost, ResumeRead, Resumption, detached
from ..records import FencedResult, ModelStepResult, PlanItem, ToolResult, TurnSummary, WokenAnswers
from . import steps

__all__ = ["continue_batch", "finishing", "wait_ms"]


async def continue_batch(
    batch: ParkedBatch,
    woken: WokenAnswers | None = None,
    read: Callable[[], Coroutine[Any, Any, ResumeRead]] | None = None,
) -> Continued:
    """Run the job of ``batch``: its results commit, then its next model step (started, not
    awaited). ``woken``: the answers' times, for a turn that was woken by them (the commit
    waits until those answers are visible to it); ``read``: the read of the session's rows
    and conversation, if another one than the store's (a submit's, started at once)."""
    next_run = names.next_run_id(batch.run_id) if batch.suspended else batch.run_id
    resumed: Resumption | None = None
    with patience(None):
        if batch.suspended:
            reading = read() if read is not None else _read(batch)
            try:
                resumed = Resumption(batch.session_id, *await reading)
            except Exception as exc:
                raise ReadLost() from exc
        settled = await steps.commit_results.direct(
            CommitContext(batch.slot, resumption=resumed, rebind=batch.rebind),
            batch.session_id,
            batch.root_session_id,
            batch.run_id,
            next_run,
            batch.plan,
            batch.results,
            woken,
        )
    inputs = resumed.take(settled) if resumed is not None else None
    agent = current().registry.get(batch.agent_type)
    if (
        FENCED in settled
        or finishing(agent, batch.plan, settled["results"]) is not None
        or batch.step + 1 >= agent.max_steps
    ):
        return Continued(settled, None)  # the turn does not call the model again
    summary = cast(TurnSummary, dict(batch.summary))
    summary["waitMs"] += wait_ms(settled["results"])

    async def next_step() -> ModelStepResult | FencedResult:
        with patience(None):
            return await steps.model_answer(
                CommitContext(
                    names.turn_slot(batch.workflow_id, next_run, batch.step + 1, "model"),
                    inputs=inputs,
                ),
                batch.session_id,
                batch.root_session_id,
                next_run,
                batch.agent_type,
                batch.step + 1,
                summary,
            )

    return Continued(settled, detached(next_step()))


def _read(batch: ParkedBatch) -> Coroutine[Any, Any, ResumeRead]:
    return current().store.resume_inputs(batch.session_id, [batch.root_session_id])


def wait_ms(ordered: list[ToolResult]) -> int:
    """How long a batch's calls waited for their answers, in all."""
    return sum(r.get("waitMs", 0) for r in ordered)


def finishing(agent: Agent, plan: list[PlanItem], ordered: list[ToolResult]) -> ToolResult | None:
    """The first successful result of a ``finish_with`` tool in the batch: it ends the turn."""
    for item, result in zip(plan, ordered, strict=True):
        tool = agent.tool(item["toolName"])
        if tool is not None and tool.finish_with and result.get("ok"):
            return result
    return None
