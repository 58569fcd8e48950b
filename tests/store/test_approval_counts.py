"""The approval counts of revision 0015 add up to the inbox's rows by tool, exactly: after
parks, answers, sessions ended and deleted, written concurrently from several connections
while merges run; a merge changes no sum and leaves one slot a tool; a scrape merges once the
slots pile up; and the upgrade counts the approvals already waiting."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from helix_dbos.store import pending_figures as figures_module
from helix_dbos.store.migrate import upgrade
from helix_dbos.store.pending_figures import merge_approval_counts, pending_figures
from helix_dbos.store.store import SessionStore

from .pending_rows import WINDOW_MS, call, parked
from .store_builders import now_ms

TOOLS = ("transfer", "refund", "publish")


async def rows(store: SessionStore, sql: str) -> list[Any]:
    async with store.transaction() as conn:
        return list((await conn.execute(sa.text(sql))).all())


async def counted(store: SessionStore) -> dict[str, int]:
    """The counts' sums by tool (tools at 0 left out)."""
    found = await rows(
        store, "SELECT tool_name, sum(n) FROM __agents_approval_counts GROUP BY tool_name"
    )
    return {tool: int(n) for tool, n in found if int(n)}


async def listed(store: SessionStore) -> dict[str, int]:
    """The inbox's rows by tool."""
    found = await rows(
        store, "SELECT tool_name, count(*) FROM __agents_approvals GROUP BY tool_name"
    )
    return {tool: int(n) for tool, n in found}


async def answer(store: SessionStore, sid: str, tcid: str) -> None:
    """Store an answer to one call, as a submit does."""

    def answered(states: dict[str, Any]) -> None:
        entry = states[sid].pending[tcid]
        states[sid].pending[tcid] = entry.model_copy(
            update={"submitted_at": now_ms(), "response": {"result": 1}}
        )

    await store.update([sid], answered)


async def end(store: SessionStore, sid: str) -> None:
    def failed(states: dict[str, Any]) -> None:
        states[sid].status = "failed"

    await store.update([sid], failed)


async def test_the_counts_add_up_to_the_inbox_through_concurrent_writes(
    store: SessionStore,
) -> None:
    async def life(i: int) -> None:
        calls = [call(f"c{i}_{j}", TOOLS[(i + j) % 3], "approval") for j in range(1 + i % 3)]
        await parked(store, f"s{i}", *calls)
        if i % 4 == 1:
            await answer(store, f"s{i}", calls[0].tool_call_id)
        elif i % 4 == 2:
            await end(store, f"s{i}")
        elif i % 4 == 3:
            async with store.transaction() as conn:
                await conn.execute(
                    sa.text("DELETE FROM __agents_states WHERE session_id = :s"), {"s": f"s{i}"}
                )

    async def merges(stop: asyncio.Event) -> int:
        n = 0
        while not stop.is_set():
            await merge_approval_counts(store)
            n += 1
            await asyncio.sleep(0)
        return n

    stop = asyncio.Event()
    merging = asyncio.create_task(merges(stop))
    for first in range(0, 60, 12):
        await asyncio.gather(*(life(i) for i in range(first, first + 12)))
    stop.set()
    assert await merging > 0
    expected = await listed(store)
    assert sum(expected.values()) > 0
    assert await counted(store) == expected
    found = await pending_figures(store, client_window_ms=WINDOW_MS)
    assert found.approvals == expected


@pytest.mark.postgres_only
async def test_a_merge_leaves_one_slot_a_tool_and_every_sum(pg_store: SessionStore) -> None:
    for i in range(24):
        await parked(pg_store, f"s{i}", call(f"c{i}", TOOLS[i % 3], "approval"))
    # Writes from several connections at once: a slot each.
    await asyncio.gather(*(answer(pg_store, f"s{i}", f"c{i}") for i in range(0, 24, 2)))
    before = await counted(pg_store)
    await merge_approval_counts(pg_store)
    assert await counted(pg_store) == before == await listed(pg_store)
    slots = await rows(pg_store, "SELECT tool_name, slot FROM __agents_approval_counts")
    assert sorted(slots) == sorted((tool, 0) for tool in {t for t, _ in slots})


@pytest.mark.postgres_only
async def test_a_scrape_merges_once_the_slots_pile_up(
    pg_store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.gather(
        *(parked(pg_store, f"s{i}", call(f"c{i}", TOOLS[i % 3], "approval")) for i in range(12))
    )
    many = await rows(pg_store, "SELECT count(*) FROM __agents_approval_counts WHERE slot <> 0")
    assert many[0][0] > 0
    monkeypatch.setattr(figures_module, "MERGE_ABOVE", 0)
    found = await pending_figures(pg_store, client_window_ms=WINDOW_MS)
    assert found.approvals == await listed(pg_store) == await counted(pg_store)
    left = await rows(pg_store, "SELECT count(*) FROM __agents_approval_counts WHERE slot <> 0")
    assert left[0][0] == 0


async def test_the_upgrade_counts_the_approvals_already_waiting(db_url: str) -> None:
    upgrade(db_url, "0014")
    store = SessionStore.from_url(db_url)
    try:
        for i in range(7):
            await parked(store, f"s{i}", call(f"c{i}", TOOLS[i % 3], "approval"))
        upgrade(db_url)
        assert (
            await counted(store)
            == await listed(store)
            == {"transfer": 3, "refund": 2, "publish": 2}
        )
    finally:
        await store.close()
