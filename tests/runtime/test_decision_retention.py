"""The decision record's own retention (Postgres and SQLite): a decision survives the deletion
of its session and is deleted once older than its own period, by the retention sweep, the
runtime's sweeper and ``helix-dbos prune``; never while its approval still waits (a quorum's
partial approval). The batches and two sweepers at once: tests/store/test_decisions.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from helix_dbos.core.clock import now_ms
from helix_dbos.runtime import AgentRuntime
from helix_dbos.store.decisions import DecisionQuery, list_decisions
from helix_dbos.store.retention import Retention, sweep
from helix_dbos.store.store import SessionStore
from tests.runtime.approval_steps import decide, parked, tool_end
from tests.runtime.conftest import MakeRuntime
from tests.runtime.retention_rows import rows_of, run_cli
from tests.store.decision_rows import row, write
from tests.support.bank import ARGS, Bank
from tests.support.treasury import finance, treasurer

DAY_MS = 86_400_000


async def approvals_on_record(store: SessionStore) -> list[str]:
    page = await list_decisions(store, DecisionQuery(limit=500))
    return sorted(f"{d.approval_id}:{d.principal}" for d in page.decisions)


async def _wait(probe: Callable[[], Any], seconds: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await probe():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_decisions_outlive_their_session_and_wait_for_their_approval(
    make_runtime: MakeRuntime,
) -> None:
    bank = Bank()
    rt: AgentRuntime = await make_runtime([treasurer(bank)], retention_sweep_seconds=0)
    done = await parked(rt, "four_eyes")
    await decide(rt, done, finance("bob"))
    await tool_end(rt, done.root_session_id)
    waiting = await parked(rt, "two_of_three")
    await decide(rt, waiting, finance("ann"))  # counted: the quorum waits for one more
    keep_three_days = Retention(default=0.0, decisions=3 * 86_400.0)
    now = datetime.now(UTC)

    # Two days on (past the call's tombstone), the sessions' retention deletes the ended
    # session; its decision stays on record, within the record's own retention.
    swept = await sweep(rt.store, keep_three_days, now=now + timedelta(days=2))
    assert (swept.trees, swept.decisions) == (1, 0)
    assert (await rows_of(rt.store, done.root_session_id))["__agents_states"] == 0
    both = [f"{done.approval_id}:bob", f"{waiting.approval_id}:ann"]
    assert await approvals_on_record(rt.store) == sorted(both)

    # Four days on, past the record's own retention: the decided approval's row goes; the
    # partial approval of the one that still waits stays, however old.
    later = now + timedelta(days=4)
    dry = await sweep(rt.store, keep_three_days, dry_run=True, now=later)
    assert dry.decisions == 1 and len(await approvals_on_record(rt.store)) == 2
    swept = await sweep(rt.store, keep_three_days, now=later)
    assert swept.decisions == 1
    assert await approvals_on_record(rt.store) == [f"{waiting.approval_id}:ann"]

    # Once the quorum is reached the approval no longer waits: its two rows may go.
    await decide(rt, waiting, finance("bo"))
    await tool_end(rt, waiting.root_session_id)
    swept = await sweep(rt.store, Retention(decisions=3 * 86_400.0), now=later)
    assert (swept.trees, swept.decisions) == (0, 2)
    assert await approvals_on_record(rt.store) == []
    assert bank.runs == [ARGS, ARGS]


async def test_the_runtime_sweeper_keeps_the_record_for_its_own_retention(
    make_runtime: MakeRuntime,
) -> None:
    """No session retention at all: the sweeper runs for the record's alone."""
    rt = await make_runtime(
        [treasurer(Bank())], retention_sweep_seconds=0.2, decision_retention_days=30
    )
    now = now_ms()
    await write(rt.store, [row(i, now - 31 * DAY_MS) for i in range(3)])
    await write(rt.store, [row(10, now - 29 * DAY_MS)])

    async def swept() -> bool:
        return await approvals_on_record(rt.store) == ["r::c10:approver2"]

    await _wait(swept)


async def test_prune_deletes_the_decisions_past_their_retention(
    make_runtime: MakeRuntime, db_url: str
) -> None:
    rt = await make_runtime([treasurer(Bank())], retention_sweep_seconds=0)
    now = now_ms()
    await write(rt.store, [row(i, now - 8 * DAY_MS) for i in range(3)])
    await write(rt.store, [row(10, now)])

    def prune(*extra: str) -> dict[str, Any]:
        return run_cli(["prune", "--database-url", db_url, "--json", *extra])

    dry = await asyncio.to_thread(prune, "--decisions-older-than", "7d", "--dry-run")
    assert (dry["decisions"], dry["trees"]) == (3, 0)
    assert len(await approvals_on_record(rt.store)) == 4
    done = await asyncio.to_thread(prune, "--decisions-older-than", "7d", "--older-than", "30d")
    assert done["decisions"] == 3
    assert await approvals_on_record(rt.store) == ["r::c10:approver2"]
