"""The turn workflow: model step, tools, park on client calls, commit results, repeat.

Replay and crash behaviour, at each await:

* ``model_answer``: calls the model and commits its answer, exactly once (``_commits/once.py``); a
  replay returns the recorded response, the provider is not called again.
* ``commit_results`` / ``finish_turn``: exactly-once commits; a replay never writes twice.

These three are the workflow's own code, recorded by their checkpoints (layouts 2 and 3,
``names.TURN_LAYOUT``). A turn recorded by contract-1 (layout 1, where they were DBOS steps)
is no longer replayed: it ends failed, typed and retryable (``_Turn._retired``). A turn's
first model step may run before its workflow does
(started by its entry), and a batch's results commit and the next model step may run while
DBOS hands the turn its wake-up (the batch's job, ``_turn/batch_job.py``, started by the submit that
completed the batch): the same code under the same slots, joined by the turn
(``handover.py``).
* ``DBOS.recv_async`` (parking): the deadline is absolute (recorded by DBOS's sleep step), so
  a restart re-arms with the remaining time; an answer sent while the process was down is
  buffered and consumed at once.
* ``run_server_tool``: recorded; an approved tool runs once.
* child workflows (sub-agents) have deterministic ids, so a replay re-attaches to the child.

The body holds no clock reads that change control flow, no I/O and no randomness.

Fencing: every commit is guarded by the session's run and status (``store.guard``). When a
step finds its run stopped (an interrupt, an abort) or superseded, it writes nothing and
returns ``{"fenced": reason}``; the turn then ends at once with no further writes, and its
workflow result says ``outcome: "stopped"``.

Database faults inside the turn are waited out (``store.patience(None)``): the turn pauses
until the database is back, it never fails because of one.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any, cast

from dbos import DBOS

from ...core.agents import Agent
from ...errors import HelixError
from ...observability.log import log_event
from ...store import patience
from .. import names
from .._commits.once import CommitContext
from .._context import current, rooms, workflow_task
from .._handover import EntryInputs, FirstStep, ParkedBatch, ResumeRead
from .._triage import SUSPENDING_KINDS
from ..records import (
    CHILD_ENDS_KEY,
    FencedResult,
    HibernationRecord,
    ModelStepResult,
    PlanItem,
    ServerToolResult,
    ToolResult,
    TurnError,
    TurnOutcome,
    WokenAnswers,
)
from . import asks, hibernation, steps
from .batch_job import continue_batch, finishing, wait_ms
from .children import run_child
from .failure import failure_of, turn_error
from .outcomes import (
    Ending,
    Stopped,
    check_fence,
    completed,
    ids,
    new_summary,
    outcome_of,
    stopped_outcome,
)
from .park import park
from .resolve import child_result, resolve_call
from .server_tool import run_server_tool
from .steps import model_answer

__all__ = ["run_turn"]


@DBOS.workflow(name=names.TURN_WORKFLOW)
async def run_turn(
    session_id: str, turn_id: str, agent_type: str, root_session_id: str, layout: int = 1
) -> TurnOutcome:
    """Run one turn of ``session_id`` (its entry message is already committed).

    ``layout`` is the step layout the turn records (``names.TURN_LAYOUT``); a turn recorded
    before it was an argument replays in layout 1, the default.
    """
    with patience(None), workflow_task():
        outcome = await _Turn(session_id, turn_id, agent_type, root_session_id, layout).run()
        await rooms.after_turn(session_id, agent_type, outcome)  # companion replies kept meanwhile
        return outcome


async def _given(read: ResumeRead) -> ResumeRead:
    """A read made already, as the batch job's read."""
    return read


TakenUp = tuple[int, list[PlanItem], dict[str, ToolResult], str | None]
"""A hibernated batch a turn settles first: its step, that step's plan, the results known
before its park, and the call whose sub-agent it waited on (then it runs the rest of the
step's tools first)."""


@dataclass(slots=True)
class Handed:
    """What a turn was handed by whoever runs it, beyond what the database holds: one value,
    so the turn's own fields say what the turn is."""

    next_step: EntryInputs | FirstStep | None = None
    """What the next model step starts from, when this process has it: the step itself,
    started as the entry committed (``_handover``) or by the last batch's job
    (``batch_job``), or the entry's inputs (handed on in the step's ``CommitContext``)."""
    taken_up: TakenUp | None = None
    """Set on a turn taken up after it hibernated (``_hibernated/continuation.py``)."""
    rebind: str | None = None
    """The workflow that continues this turn after it hibernated: its next results commit
    names it on the session's row (its ``CommitContext``)."""


RETIRED_MESSAGE = (
    "This turn was recorded by a release whose turns this one no longer replays (contract-1); "
    "retry the session to run it again"
)
"""The error message of a turn recorded by contract-1 (``_Turn._retired``)."""


class _Turn:
    # Slots: one of these lives as long as its turn is parked, and many turns park at once.
    __slots__ = (
        "agent",
        "agent_type",
        "handed",
        "layout",
        "root_session_id",
        "run_id",
        "session_id",
        "summary",
        "workflow_id",
    )

    def __init__(
        self,
        session_id: str,
        turn_id: str,
        agent_type: str,
        root_session_id: str,
        layout: int = names.TURN_LAYOUT,
    ) -> None:
        self.session_id = session_id
        self.layout = layout
        self.workflow_id = DBOS.workflow_id or ""
        self.root_session_id = root_session_id
        self.agent_type = agent_type
        self.agent: Agent = current().registry.get(agent_type)
        self.run_id = turn_id
        self.handed = Handed()
        self.summary = new_summary()

    async def run(self) -> TurnOutcome:
        """Run the turn: from its entry, or (``handed.taken_up``) from a batch it hibernated on."""
        first = 0
        resume, self.handed.taken_up = self.handed.taken_up, None
        if resume is None:
            ended = await self._take_entry()
            if ended is not None:
                return ended
        # One frame for the loop and its error handling: every frame on a parked turn's stack
        # is memory each parked turn holds.
        try:
            try:
                if resume is not None:
                    first, plan, results, child = resume
                    del resume
                    if child is None:
                        outcome = await self._settle(first, plan, results, {})
                    else:
                        outcome = await self._step(first, (plan, results, child))
                    del plan, results
                    if outcome is not None:
                        return outcome
                    first += 1
                for step in range(first, self.agent.max_steps):
                    outcome = await self._step(step)
                    if outcome is not None:
                        return outcome
                return await self._finish("failed", "", self._error(None, "max_steps_exceeded"))
            except Stopped:
                raise
            except Exception as exc:
                # The turn ends failed and typed (``failure_of``), whatever went wrong, so the
                # session never stays "running" with no workflow behind it. DBOS's own
                # cancellation is a BaseException and passes through.
                return await self._fail(failure_of(exc), exc)
        except Stopped:
            return stopped_outcome(self.run_id)
        finally:
            # A step started for this turn that it ended (or was cancelled) before taking.
            entry, self.handed.next_step = self.handed.next_step, None
            if isinstance(entry, asyncio.Task):
                entry.cancel()
            current().batch_jobs.forget(DBOS.workflow_id or "")

    async def _take_entry(self) -> TurnOutcome | None:
        """Take what the turn's entry handed over (``handover``) as the first step's start;
        the turn's outcome if it ends here: its entry failed, or contract-1 recorded it."""
        handed = await current().handovers.take(self.workflow_id)
        if handed is None:
            # The entry that started this turn failed: there is no run to continue.
            return stopped_outcome(self.run_id)
        if self.layout < 2:
            return await self._retired()  # after its entry committed, if it was ours
        self.handed.next_step = handed if isinstance(handed, (asyncio.Task, EntryInputs)) else None
        return None

    async def _retired(self) -> TurnOutcome:
        """A turn recorded by contract-1 (layout 1, its commits DBOS steps this release no
        longer has): it cannot replay, so it ends failed, typed and retryable (``retry``
        runs the turn again from its conversation; docs/migrations.md)."""
        error = self._error(None, "framework_turn_lost", retryable=True)
        error["message"] = RETIRED_MESSAGE
        try:
            return await self._finish("failed", "", error)
        except Stopped:
            return stopped_outcome(self.run_id)

    def _error(self, exc: BaseException | None, code: str, retryable: bool = False) -> TurnError:
        return turn_error(
            exc,
            code,
            retryable=retryable,
            session_id=self.session_id,
            run_id=self.run_id,
            scrubber=current().scrubber,  # type: ignore[arg-type]
        )

    async def _fail(self, exc: HelixError, cause: BaseException) -> TurnOutcome:
        usage = exc.details.get("modelUsage")
        if usage is not None:
            self.summary["steps"] += 1
            self.summary["inputTokens"] += usage.get("input_tokens", 0)
            self.summary["outputTokens"] += usage.get("output_tokens", 0)
        return await self._finish("failed", "", self._error(cause, exc.code, exc.retryable))

    def _at(self, step: int, kind: str, inputs: EntryInputs | None = None) -> CommitContext:
        """The context of a layout-2 commit of this run: its slot (``inputs``: handed on)."""
        return CommitContext(
            names.turn_slot(self.workflow_id, self.run_id, step, kind), inputs=inputs
        )

    async def _model(self, step: int) -> ModelStepResult | FencedResult:
        """The step's committed model answer (a subclass may start from a restored one)."""
        args = (self.session_id, self.root_session_id, self.run_id, self.agent_type, step)
        entry, self.handed.next_step = self.handed.next_step, None  # to one step only
        if isinstance(entry, asyncio.Task):
            return cast("ModelStepResult | FencedResult", await entry)
        return await model_answer(self._at(step, "model", entry), *args, self.summary)

    async def _step(
        self,
        step: int,
        taken: tuple[list[PlanItem], dict[str, ToolResult], str] | None = None,
    ) -> TurnOutcome | None:
        """Run model step ``step``, its tools and its batch. ``taken``: the step's plan, its
        results so far and the call whose sub-agent ended, for a turn taken up after it
        hibernated waiting on that sub-agent: the rest of the step's tools run now."""
        if taken is None:
            committed = check_fence(await self._model(step))
            plan, deadlines = committed["plan"], committed["deadlines"]
            reply = self._counted(committed["response"])
            if reply is not None:
                return reply
            del committed
            results: dict[str, ToolResult] = {}
        else:
            plan, results, deadlines = await self._taken_up(taken)
            del taken
        hibernated = await self._run_tools(step, plan, results)
        if hibernated is not None:
            return hibernated
        deadlines = await asks.register(self, step, plan, results, deadlines)  # a tool asked
        suspending = [i for i in plan if i["kind"] in SUSPENDING_KINDS]
        woken: WokenAnswers = {}
        if suspending:
            self.summary["clientCalls"] += len(suspending)
            # A batch of client calls alone can be continued by the submit that completes it
            # (``batch_job``); an approved call's tool runs here, as a DBOS step. Not on a
            # database of one writer at a time (SQLite): the early commit would only contend
            # with DBOS's consume of the wake-up (and a read that then writes fails at once).
            early = current().store.many_writers and all(
                i["kind"] != "approval" and "asks" not in i for i in suspending
            )
            window = self._hot_window()
            hibernated = await self._hibernated_at_once(step, plan, results, window)
            if hibernated is not None:
                return hibernated
            batch = self._batch(step, plan, results) if early else None
            # Parked here, with no frame of its own: a parked turn's memory is its stack.
            woken, waiting = await park(
                self.session_id, self.run_id, suspending, deadlines, batch, window
            )
            del batch
            if waiting and window != 0:
                # The hot window (or a deadline) ended the wait with calls unanswered.
                decided = await self._hibernate(step, plan, results, None)
                if decided["hibernated"]:
                    return self._hibernated(None)
        return await self._settle(step, plan, results, woken)

    def _counted(self, response: dict[str, Any]) -> TurnOutcome | None:
        """Count a committed model answer in the summary; the turn's outcome if it was the
        final reply (whose commit also recorded the turn's end, in one transaction).

        Read from the recorded JSON, not a model object: nothing of the response stays alive
        while the turn is parked (a parked turn's memory is its coroutine's locals)."""
        usage = response.get("usage") or {}
        self.summary["steps"] += 1
        self.summary["inputTokens"] += int(usage.get("input_tokens", 0))
        self.summary["outputTokens"] += int(usage.get("output_tokens", 0))
        if response.get("tool_calls"):
            return None
        return outcome_of("completed", str(response.get("text", "")), None, None, self.run_id)

    async def _run_tools(
        self, step: int, plan: list[PlanItem], results: dict[str, ToolResult]
    ) -> TurnOutcome | None:
        """Run the step's tools that are not suspending calls, into ``results``; the turn's
        outcome if it hibernated waiting on a sub-agent."""
        for item in plan:
            if item["toolCallId"] in results:
                continue  # ran before the turn hibernated waiting on a sub-agent
            if item["kind"] == "invalid":
                results[item["toolCallId"]] = {
                    "toolCallId": item["toolCallId"],
                    "toolName": item["toolName"],
                    "ok": False,
                    "error": item["error"],
                    "errorCode": "validation_failed",
                }
            elif item["kind"] in ("server", "companion"):
                results[item["toolCallId"]] = completed(ids(item), await self._tool(item))
            elif item["kind"] == "subagent":
                ran = await self._run_child(item)
                if ran is None:
                    # The sub-agent hibernated: so does this turn, until the sub-agent ends.
                    decided = await self._hibernate(step, plan, results, item["toolCallId"])
                    if decided["hibernated"]:
                        return self._hibernated(item["toolCallId"])
                    ran = child_result(decided["childOutcome"])
                results[item["toolCallId"]] = completed(ids(item), ran)
        return None

    async def _hibernated_at_once(
        self,
        step: int,
        plan: list[PlanItem],
        results: dict[str, ToolResult],
        window: float | None,
    ) -> TurnOutcome | None:
        """With a hot window of 0, the hibernate commit before the park: the outcome if the
        turn hibernated; ``None`` if it parks (its window is not 0) or goes on live.

        A wait of 0 would only find answers that the commit reads on the row anyway, so the
        row decides first and only a batch it found settled parks, without waiting (taking
        the wake-ups). A turn that hibernates records no DBOS step after its park, and one
        that goes on records the park's: so a replay in the other order (under another
        window, or by the release before) meets the steps the turn recorded."""
        if window != 0:
            return None
        decided = await self._hibernate(step, plan, results, None)
        return self._hibernated(None) if decided["hibernated"] else None

    def _hot_window(self) -> float | None:
        """This turn's hot window, if its park may hibernate: a turn recorded in layout 3."""
        if self.layout < 3:
            return None
        return hibernation.hot_window(self.agent)

    async def _hibernate(
        self,
        step: int,
        plan: list[PlanItem],
        results: dict[str, ToolResult],
        child: str | None,
    ) -> HibernationRecord:
        """The hibernate commit of ``step``'s batch (or of its wait on the sub-agent of
        ``child``): hibernated, or what the turn goes on with live."""
        return check_fence(
            await hibernation.hibernate(
                self.session_id,
                self.run_id,
                self.workflow_id,
                step,
                plan,
                results,
                self.summary,
                child=child,
            )
        )

    def _hibernated(self, child: str | None) -> TurnOutcome:
        """The outcome of a turn that hibernated (waiting on the sub-agent of ``child``)."""
        outcome = outcome_of("hibernated", "", None, None, self.run_id)
        if child is not None:
            outcome["continueAs"] = names.continuation_workflow_id(
                self.session_id, self.run_id, child
            )
        return outcome

    async def _taken_up(
        self, taken: tuple[list[PlanItem], dict[str, ToolResult], str]
    ) -> tuple[list[PlanItem], dict[str, ToolResult], dict[str, int]]:
        """For a turn taken up after it waited on a sub-agent (``taken``: the step's plan, its
        results so far, and the call): the plan, the results with the sub-agent's, and the
        deadlines of the run's pending calls, from one read of its row. The sub-agent's
        outcome is the one it reported (``hibernation.child_ended``); a replay after the
        results commit finds none, and that commit's recorded result is taken then."""
        plan, results, call = taken
        state = await current().store.load(self.session_id)
        pending = state.pending.values() if state is not None else ()
        deadlines = {p.tool_call_id: p.deadline_at for p in pending if p.run_id == self.run_id}
        ended = state.metadata.get(CHILD_ENDS_KEY, {}).get(call) if state is not None else None
        if ended is None:
            error = self._error(None, "framework_turn_lost")
            error["message"] = "The sub-agent's end was not recorded"
            ended = outcome_of("failed", "", None, error, self.run_id)
        item = next(i for i in plan if i["toolCallId"] == call)
        results[call] = completed(ids(item), child_result(cast(TurnOutcome, ended)))
        return plan, results, deadlines

    async def _settle(
        self,
        step: int,
        plan: list[PlanItem],
        results: dict[str, ToolResult],
        woken: WokenAnswers,
    ) -> TurnOutcome | None:
        """After the batch of ``step`` (if any) stopped waiting: run approved tools, commit
        the results, and end the turn if a tool finished it."""
        suspending = [i for i in plan if i["kind"] in SUSPENDING_KINDS]
        if any(i["kind"] == "approval" or "asks" in i for i in suspending):
            # An approved call's tool runs before the results commit: read the answers
            # first. Without approvals, the commit itself resolves them (one step fewer).
            collected = await steps.collect_answers(
                self.session_id, self.run_id, [i["toolCallId"] for i in suspending], woken
            )
            for item in suspending:
                results[item["toolCallId"]] = await self._resolve(
                    item, collected["answers"].get(item["toolCallId"]), collected["abandon"]
                )
            woken = await self._ask_rounds(step, suspending, results, woken)
        batch = self._batch(step, plan, results)
        read = self._prior_read()
        given = None if read is None else functools.partial(_given, read)
        # The batch's job (``batch_job``): the one a submit started here for it, or run now.
        continued = await current().batch_jobs.run(batch, lambda b: continue_batch(b, woken, given))
        settled, self.handed.next_step = continued.settled, continued.next_step
        del continued
        ordered = check_fence(settled)["results"]
        steps.log_settled(self.session_id, self.run_id, ordered)
        self.summary["waitMs"] += wait_ms(ordered)
        self.run_id = names.next_run_id(self.run_id) if batch.suspended else self.run_id
        finished = finishing(self.agent, plan, ordered)
        if finished is not None:
            return await self._finish("completed", "", None, output=finished.get("result"))
        return None

    async def _ask_rounds(
        self,
        step: int,
        suspending: list[PlanItem],
        results: dict[str, ToolResult],
        woken: WokenAnswers,
    ) -> WokenAnswers:
        """While a tool called again with its answer asks again (``asks``), park on its next
        round and call it again with that answer; the answers the turn was woken for.

        A later round parks live until answered or its deadline (no hibernation: the
        hibernate commit and the continuation are one per batch); a restart recovers it."""
        again = asks.asked_again(suspending, results)
        while again:
            deadlines = await asks.register_round(self, step, again, results)
            parked = [i for i in again if i["toolCallId"] in deadlines]
            if not parked:
                break
            more, _ = await park(self.session_id, self.run_id, parked, deadlines)
            woken = {**woken, **more}
            ids = [i["toolCallId"] for i in parked]
            collected = await steps.collect_answers(self.session_id, self.run_id, ids, more)
            for item in parked:
                results[item["toolCallId"]] = await self._resolve(
                    item, collected["answers"].get(item["toolCallId"]), collected["abandon"]
                )
            again = asks.asked_again(parked, results)
        return woken

    def _prior_read(self) -> ResumeRead | None:
        """The session's rows and conversation, if this turn read them already for its batch's
        job (a continuation reads them with its hibernation record); ``None``: the job reads."""
        return None

    def _batch(
        self, step: int, plan: list[PlanItem], results: dict[str, ToolResult]
    ) -> ParkedBatch:
        """The batch of ``step`` as it stands, for its job (``batch_job``)."""
        return ParkedBatch(
            workflow_id=self.workflow_id,
            live_workflow_id=DBOS.workflow_id or "",
            session_id=self.session_id,
            root_session_id=self.root_session_id,
            agent_type=self.agent_type,
            run_id=self.run_id,
            step=step,
            plan=plan,
            results=results,
            summary=self.summary,  # the job copies it before it adds to it
            rebind=self.handed.rebind,
        )

    async def _tool(self, item: PlanItem) -> ServerToolResult:
        """A server tool's result, or a companion call's (``companions.sends``, a step too)."""
        if item["kind"] == "server":
            return await run_server_tool(self.agent_type, item["toolName"], item["input"])
        args = (self.session_id, self.run_id, self.root_session_id, self.agent_type)
        result: ServerToolResult = await rooms.run_companion_tool(*args, cast(dict[str, Any], item))
        return result

    async def _resolve(
        self, item: PlanItem, entry: dict[str, Any] | None, abandon: bool
    ) -> ToolResult:
        """A suspended call's result; an approved approval runs its tool (a recorded step)."""
        result = resolve_call(item, entry, abandon)
        if "asks" in item:  # answered: the tool is called again with the answer
            return await asks.answer(self.agent_type, item, entry, result)
        run_input = result.pop("runInput", None)
        if run_input is not None:
            ran = await run_server_tool(self.agent_type, item["toolName"], run_input)
            result = completed(result, ran)
        return result

    async def _run_child(self, item: PlanItem) -> ServerToolResult | None:
        return await run_child(self.session_id, self.run_id, self.root_session_id, item, run_turn)

    async def _finish(
        self, outcome: Ending, text: str, error: TurnError | None, output: Any = None
    ) -> TurnOutcome:
        args = (self.session_id, self.run_id, outcome, text, error, self.summary)
        check_fence(
            await steps.finish_turn.direct(self._at(-1, "finish"), *args, self.root_session_id)
        )
        log_event(
            "turn.summary",
            sessionId=self.session_id,
            runId=self.run_id,
            outcome=outcome,
            **self.summary,
        )
        return outcome_of(outcome, text, output, error, self.run_id)
