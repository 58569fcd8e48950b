"""Compare-and-swap on a session row under concurrent writers: no update is ever lost."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from helix_dbos.core.session import SessionState
from helix_dbos.errors import StaleStateError
from helix_dbos.store.store import NoChange, SessionStore
from tests.store.store_builders import session

WRITERS = 20


def increment(session_id: str, writer: int) -> Callable[[dict[str, SessionState]], int]:
    """A mutation that bumps a counter and records who wrote."""

    def mutate(states: dict[str, SessionState]) -> int:
        meta = states[session_id].metadata
        meta["counter"] = int(meta.get("counter", 0)) + 1
        meta["writers"] = [*meta.get("writers", []), writer]
        return int(meta["counter"])

    return mutate


async def run_writers(store: SessionStore, attempts: int) -> list[int | StaleStateError]:
    """Start every writer at once; each either returns its counter value or a StaleStateError."""
    start = asyncio.Event()

    async def writer(n: int) -> int:
        await start.wait()
        _, value = await store.update(["s1"], increment("s1", n), attempts=attempts)
        return value

    tasks = [asyncio.create_task(writer(n)) for n in range(WRITERS)]
    await asyncio.sleep(0)
    start.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for r in results:
        # Anything other than a value or a typed conflict is a bug.
        assert isinstance(r, int | StaleStateError), repr(r)
    return results  # type: ignore[return-value]


async def test_no_update_is_lost(store: SessionStore) -> None:
    """With a generous budget all 20 writers land and the counter is exactly 20."""
    await store.create_session(session("s1"))
    results = await run_writers(store, attempts=500)
    assert all(isinstance(r, int) for r in results)
    final = await store.get("s1")
    assert final.metadata["counter"] == WRITERS
    assert sorted(final.metadata["writers"]) == list(range(WRITERS))
    # Each write saw a distinct counter value: the writes were serialized, one after another.
    assert sorted(results) == list(range(1, WRITERS + 1))  # type: ignore[type-var]
    assert final.version == WRITERS


async def test_exhausted_budget_fails_loudly(store: SessionStore) -> None:
    """With attempts=3 a writer either lands or gets StaleStateError; nothing is overwritten."""
    await store.create_session(session("s1"))
    results = await run_writers(store, attempts=3)
    landed = [r for r in results if isinstance(r, int)]
    failed = [r for r in results if isinstance(r, StaleStateError)]
    assert len(landed) + len(failed) == WRITERS
    assert landed, "at least the first writer lands"
    final = await store.get("s1")
    assert final.metadata["counter"] == len(landed)
    assert len(final.metadata["writers"]) == len(landed)
    assert sorted(landed) == list(range(1, len(landed) + 1))
    assert final.version == len(landed)
    for err in failed:
        assert err.code == "state_conflict"
        assert err.retryable
        assert err.details["attempts"] == 3


async def test_two_rows_update_atomically(store: SessionStore) -> None:
    """A write to the root and a sub-agent either changes both rows or neither."""
    await store.create_session(session("root"))
    await store.create_session(session("child", root="root"))

    def both(states: dict[str, SessionState]) -> None:
        for s in states.values():
            s.metadata["n"] = int(s.metadata.get("n", 0)) + 1

    async def one() -> None:
        await store.update(["root", "child"], both, attempts=500)

    await asyncio.gather(*(one() for _ in range(10)))
    root, child = await store.get("root"), await store.get("child")
    assert root.metadata["n"] == child.metadata["n"] == 10
    assert root.version == child.version == 10


async def test_stale_save_is_refused(store: SessionStore) -> None:
    """A save from an outdated copy fails instead of overwriting the newer row."""
    created = await store.create_session(session("s1"))
    newer = await store.save(created.model_copy(update={"metadata": {"by": "first"}}))
    try:
        await store.save(created.model_copy(update={"metadata": {"by": "second"}}))
    except StaleStateError as err:
        assert err.details["sessionId"] == "s1"
    else:
        raise AssertionError("a stale save was accepted")
    assert (await store.get("s1")).metadata == {"by": "first"}
    assert newer.version == 1


async def test_a_mutation_runs_again_after_a_lost_race(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``update`` re-runs the whole mutation on fresh states when its write loses: a mutation
    must only change the states it is given and return its value, never collect into outer
    variables (which would hold the lost attempt's work too)."""
    await store.create_session(session("s1"))
    calls: list[int] = []
    original = SessionStore._save
    lost = {"left": 1}

    async def save(self: SessionStore, state: SessionState, conn: Any) -> SessionState:
        if lost["left"]:
            lost["left"] -= 1
            raise StaleStateError("a concurrent writer won")
        return await original(self, state, conn)

    monkeypatch.setattr(SessionStore, "_save", save)

    def mutate(states: dict[str, SessionState]) -> int:
        calls.append(1)
        meta = states["s1"].metadata
        meta["counter"] = int(meta.get("counter", 0)) + 1
        return int(meta["counter"])

    _, value = await store.update(["s1"], mutate, attempts=3)
    assert len(calls) == 2  # the mutation ran twice
    assert value == 1  # ...and its second run started from the stored state again
    assert (await store.get("s1")).metadata["counter"] == 1


async def test_what_a_transaction_read_holds_until_it_commits(store: SessionStore) -> None:
    """A transaction that read a row to decide (``update`` that changes nothing) writes before
    any other writer can change that row: a concurrent update waits for its commit (the row
    lock on Postgres, the write lock on SQLite, held from the transaction's start). On SQLite the driver used to
    begin the transaction only at its first write, so a writer committed between the read and
    the write, and the body wrote from a decision on a row that no longer was."""
    await store.create_session(session("s1"))
    read_once = asyncio.Event()
    other_done = asyncio.Event()

    async def other() -> None:
        await read_once.wait()
        await store.update(["s1"], increment("s1", 2))
        other_done.set()

    def look(states: dict[str, SessionState]) -> int:
        raise NoChange(int(states["s1"].metadata.get("counter", 0)))  # a read that decides

    async def body() -> tuple[int, int]:
        _, seen = await store.update(["s1"], look)
        read_once.set()
        # The other writer gets its chance: it must still be waiting when the body goes on.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(other_done.wait(), timeout=2.0)
        again = await store.load("s1")
        assert again is not None
        _, value = await store.update(["s1"], increment("s1", 1))
        return seen, int(again.metadata.get("counter", 0))

    task = asyncio.create_task(other())
    seen, again = await store.transact(body, attempts=1)
    await asyncio.wait_for(task, timeout=60)
    assert again == seen == 0  # nothing changed the row between the body's two reads
    final = await store.get("s1")
    assert final.metadata["counter"] == 2
    assert final.metadata["writers"] == [1, 2]  # the other writer went after the commit
