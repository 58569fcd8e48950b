"""What a turn's commits and a submit send to Postgres, counted (issue 41): a statement that
falls off the fast path fails here, not only in ``bench/roundtrip.py``.

On Postgres a commit's unit of work runs on a lean driver connection: its writes queued and
sent as one statement, ``BEGIN`` only when a statement is not the last
(``store/pg_paths.py``, ``store/batch.py``). A store call in the unit that asks for a statement
of SQLAlchemy's raises ``pg.NeedsEngine``: the unit is rolled back and runs again, whole, on
SQLAlchemy, which the counts below show as more statements and a ``BEGIN``/``COMMIT`` pair.

Each commit is counted by what the task running it sends while it runs (``once.commit_once``,
under its slot's kind) and a submit by what its caller's task sends; DBOS's own statements
(the workflow's steps and messages) are not counted, so a change in DBOS does not move them.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import pytest

from helix_dbos.llm.scripted import ScriptedLLM
from tests.psycopg_probe import record_task_statements
from tests.runtime.agents import batch_script, editor_agent
from tests.runtime.conftest import MakeRuntime
from tests.runtime.statement_counts import Commits


async def _submitted(submit: Awaitable[Any]) -> tuple[Any, list[str], list[bytes]]:
    """``submit``'s result, once awaited here: the statements this task sent meanwhile and
    its transaction commands."""
    with pytest.MonkeyPatch.context() as watching:
        sent, commands = record_task_statements(watching)
        result = await submit
    return result, list(sent), list(commands)


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
async def test_a_turns_commits_and_its_submit_stay_on_the_fast_path(
    make_runtime: MakeRuntime, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn of two client calls, both answered while it is parked: its model step's commit
    (the calls, pending on the row), the submit of each answer, the results commit and the
    model step that ends the turn, each counted.

    Pinned exactly: each commit is ONE statement with no BEGIN and no COMMIT (its queued
    writes and its checkpoint, sent as one statement on the lean connection in autocommit
    mode), and each submit is two, with no BEGIN and no COMMIT either: the session's row read
    apart, then the answer's swap with the wake-up enlisted in it, as one statement. No unit
    of work is sent back to SQLAlchemy."""
    runtime = await make_runtime([editor_agent(llm=ScriptedLLM(batch_script))])
    commits = Commits(monkeypatch)
    handle = await runtime.start("editor", "2 edits")
    sid = handle.session_id
    calls = [c["toolCallId"] for c in await runtime.wait_for_pending(sid, 2)]
    submits: list[tuple[tuple[int, list[bytes]], list[str]]] = []
    for call in calls:
        answer, sent, commands = await _submitted(
            runtime.submit_tool_result(sid, call, result={"applied": 1})
        )
        assert answer.status == "accepted"
        submits.append(((len(sent), commands), sent))
    assert (await runtime.wait(sid, timeout=30))["status"] == "completed"
    assert commits.fallbacks == []
    assert commits.shape("model") == [(1, []), (1, [])], commits.statements["model"]
    assert commits.shape("results") == [(1, [])], commits.statements["results"]
    assert [shape for shape, _ in submits] == [(2, []), (2, [])]
    for _, sent in submits:  # the row, read apart; then the swap, the wake-up enlisted in it
        assert sent[0].startswith("SELECT") and "__agents_states" in sent[0], sent
        assert "cas_states" in sent[1] and "dbos.notifications" in sent[1], sent
