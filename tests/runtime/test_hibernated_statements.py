"""What an answer to a hibernated turn sends to Postgres, against a hot one (issue 43).

For long approvals every answer takes the hibernated path: the turn parked, hibernated (its
workflow ended) and the answer started its continuation. That round trip must cost no more
than one whose turn waited live for its answer. Both are counted here the same way: every
statement the round trip sends (ours and DBOS's) and the transactions they make, from the
turn's start to its end, as ``bench/roundtrip.py`` measures them; the runtime's background
work (the deadline keeper, the fleet's heartbeat, DBOS's own pollers) is left out.

The round trip is counted by a context variable set around ``start`` and ``submit``: the
turn's workflow, its first model step, a submit's batch job and a continuation are tasks
started from those calls (a task copies its context), and DBOS's calls on the database run
in threads that copy it too (``asyncio.to_thread``). The background loops were started at
launch, without it.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from helix_dbos.core import define_agent, define_tool
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime, names
from helix_dbos.runtime._commits import once
from helix_dbos.runtime._hibernated import continuation
from helix_dbos.runtime._turn import hibernation
from tests.runtime.agents import EditIn, EditOut, batch_script
from tests.runtime.conftest import MakeRuntime
from tests.runtime.statement_counts import Commits

_kind: contextvars.ContextVar[str | None] = contextvars.ContextVar("round_trip", default=None)


class RoundTrips:
    """The statements and transactions of each kind of round trip (``counting``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.statements: dict[str, list[str]] = defaultdict(list)
        self.transactions: dict[str, int] = defaultdict(int)
        for cls in (psycopg.Cursor, psycopg.AsyncCursor):
            for name in ("execute", "executemany"):
                monkeypatch.setattr(cls, name, self._counted(getattr(cls, name)))

    def _count(self, cursor: Any, query: Any) -> None:
        kind = _kind.get()
        if kind is None or query == ";":  # not a round trip's; a pool's liveness ping
            return
        self.statements[kind].append(" ".join(str(query).split())[:120])
        # A statement sent outside a transaction block starts one: its own (autocommit), or
        # the one psycopg opens before it; a lean connection's BEGIN is such a statement.
        if cursor.connection.info.transaction_status == TransactionStatus.IDLE:
            self.transactions[kind] += 1

    def _counted(self, original: Any) -> Any:
        if inspect.iscoroutinefunction(original):

            async def counted_async(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
                self._count(cursor, query)
                return await original(cursor, query, *args, **kwargs)

            return counted_async

        def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            self._count(cursor, query)
            return original(cursor, query, *args, **kwargs)

        return counted

    @staticmethod
    @contextmanager
    def counting(kind: str | None) -> Iterator[None]:
        """What is sent meanwhile, and by the tasks started meanwhile, counts as ``kind``."""
        token = _kind.set(kind)
        try:
            yield
        finally:
            _kind.reset(token)


def _agent(name: str, hibernate_after: Any) -> Any:
    edit = define_tool("edit", "Apply an edit", EditIn, EditOut, execute="client")
    return define_agent(
        name, llm=ScriptedLLM(batch_script), tools=[edit], hibernate_after=hibernate_after
    )


async def _round_trip(runtime: AgentRuntime, agent: str, kind: str | None) -> None:
    """One client call answered: the turn of ``hot`` waits for it live, the turn of
    ``cold`` hibernates first and the answer starts its continuation."""
    with RoundTrips.counting(kind):
        handle = await runtime.start(agent, "1 edit")
    sid, workflow_id = handle.session_id, handle.workflow_id or ""
    if agent == "cold":
        assert (await handle.workflow.get_result())["outcome"] == "hibernated"
    else:
        while workflow_id not in runtime.ctx.parked:
            await asyncio.sleep(0.005)
    state = await runtime.session(sid)
    (call,) = state.pending
    with RoundTrips.counting(kind):
        answer = await runtime.submit_tool_result(sid, call, result={"applied": 1})
    assert answer.status == "accepted"
    if agent == "cold":
        assert answer.continued_here
        cont_id = names.continuation_workflow_id(sid, state.run_id or "")
        outcome = await continuation._started_here[cont_id].get_result()
    else:
        outcome = await handle.workflow.get_result()
    assert outcome["outcome"] == "completed", outcome


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
async def test_an_answer_to_a_hibernated_turn_costs_no_more_than_a_hot_one(
    make_runtime: MakeRuntime, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same round trip (the entry, a model step with one client call, its answer, the
    results and the model step that ends the turn) by an agent that never hibernates and by
    one that hibernates at once (``hibernate_after=0``): the hibernated one sends no more
    statements and makes no more transactions than the hot one.

    It does less: it waits with no DBOS ``recv`` (its hibernate commit reads the row, where
    an answer already there is), and its hibernate commit is the row read apart and one
    statement. What it adds, a second workflow (the continuation's start and end), costs
    less than that: 15 statements and 13 transactions against the hot one's 21 and 14. Before,
    it sent 29 and made 18 (a recv of 0 s, and a hibernate commit of five statements)."""
    runtime = await make_runtime([_agent("hot", "never"), _agent("cold", 0)])
    for agent in ("hot", "cold"):  # first uses (compiled statements, DBOS's caches) apart
        await _round_trip(runtime, agent, None)
    counted = RoundTrips(monkeypatch)
    commits = Commits(monkeypatch)
    monkeypatch.setattr(hibernation, "commit_once", once.commit_once)  # the counted one
    for agent in ("hot", "cold"):
        await _round_trip(runtime, agent, agent)
    hot, cold = counted.statements["hot"], counted.statements["cold"]
    figures = {
        kind: (len(sent), counted.transactions[kind]) for kind, sent in counted.statements.items()
    }
    assert len(cold) <= len(hot), (figures, cold, hot)
    assert counted.transactions["cold"] <= counted.transactions["hot"], (figures, cold, hot)
    # The hibernate commit itself: one statement (the swap with its checkpoint), no BEGIN.
    assert commits.shape("hibernate") == [(1, [])], commits.statements["hibernate"]
    assert commits.fallbacks == []
