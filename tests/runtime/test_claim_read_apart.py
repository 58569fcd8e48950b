"""A new turn's claim swaps from a row and conversation read apart, unlocked (``entry``); it
sees the whole conversation because every write to it either moves the row's version (a
lost swap runs the claim again) or is made, under the row's lock, by a commit fenced on an
active status, which a claimable row is not (ARCHITECTURE.md, rule 26).

Here a stale turn's results commit (server tools only: its messages are appended with no
swap of the row) runs between the claim's read and its swap: fenced, it writes nothing, and
the conversation handed to the new turn is the one stored.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import names
from helix_dbos.runtime._commits.once import CommitContext
from helix_dbos.runtime._commits.opening import open_turn
from helix_dbos.runtime._turn import steps
from helix_dbos.runtime.records import PlanItem, ToolResult
from helix_dbos.store.store import SessionStore
from tests.runtime.conftest import MakeRuntime
from tests.support.asker import asker, script


@pytest.mark.postgres_only
async def test_a_stale_commit_between_the_claims_read_and_its_swap_writes_nothing(
    make_runtime: MakeRuntime, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if db_url.startswith("sqlite"):
        # The claim's transaction holds SQLite's write lock from its start: nothing writes
        # between its read and its swap there.
        pytest.skip("Postgres only: on SQLite the claim's read is inside its lock")
    rt = await make_runtime([asker(ScriptedLLM(script))], heal_interval_seconds=0)
    first = await rt.start("asker", "hello")
    sid = first.session_id
    assert (await rt.wait(sid))["status"] == "completed"
    stale_run = (await rt.session(sid)).run_id or ""
    item: PlanItem = {
        "toolCallId": "call_stale",
        "toolName": "lookup",
        "input": {},
        "index": 0,
        "kind": "server",
    }
    given: dict[str, ToolResult] = {
        "call_stale": {"toolCallId": "call_stale", "toolName": "lookup", "ok": True, "result": 1}
    }
    stale: list[Any] = []

    async def stale_commit() -> Any:
        slot = names.turn_slot(first.workflow_id or "", stale_run, 5, "results")
        return await steps.commit_results.direct(
            CommitContext(slot), sid, sid, stale_run, names.next_run_id(stale_run), [item], given
        )

    original = SessionStore.resume_inputs

    async def read_then_stale_commit(store: SessionStore, *args: Any, **kwargs: Any) -> Any:
        read = await original(store, *args, **kwargs)
        if not stale:
            # Another task, outside the claim's transaction (a fresh context binds none).
            task = asyncio.get_running_loop().create_task(
                stale_commit(), context=contextvars.Context()
            )
            stale.append(await task)
        return read

    monkeypatch.setattr(SessionStore, "resume_inputs", read_then_stale_commit)
    entry = await rt.store.transact(
        lambda: open_turn(
            rt.store,
            session_id=sid,
            agent_type="asker",
            turn_id="run_next0000000000000000",
            message="again",
        )
    )
    stored = await rt.messages(sid)
    assert [m.role for m in entry.history] == [m.role for m in stored], "the claim missed a write"
    assert "call_stale" not in [m.tool_call_id for m in stored]
    assert stale == [{"fenced": "stopped"}]
