"""The store's unit of work (``SessionStore.transact``): callers say what they read and write,
the store decides how (``store/unit.py``, ``pg_paths.PostgresPaths.attempt``).

* A read made before the unit has written anything goes apart (no ``BEGIN``), and a unit whose
  one write swaps from a row said read is that read and one statement.
* A row said read is handed to one update; a retried unit reads every row it updates.
* On Postgres a unit starts on a driver connection; a body that asks for SQLAlchemy runs again,
  whole, on SQLAlchemy: its writes land once, and rows it was told were read are not swapped
  from twice (the first run may have changed them in place).
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from helix_dbos.core.messages import Message
from helix_dbos.core.session import SessionState
from helix_dbos.store.store import SessionStore
from tests.store.store_builders import session


def _bump(states: dict[str, SessionState]) -> int:
    meta = states["s1"].metadata
    meta["n"] = int(meta.get("n", 0)) + 1
    return int(meta["n"])


@pytest.mark.postgres_only
async def test_a_read_then_a_swap_from_it_is_two_statements_and_no_begin(
    pg_store: SessionStore, sent: list[str]
) -> None:
    """The submit's shape: read the row, say so, swap from it. The read goes apart from the
    unit (it has written nothing yet) and the swap is its one statement."""
    store = pg_store
    await store.create_session(session("s1"))
    sent.clear()

    async def body() -> int:
        row = await store.load("s1")
        assert row is not None
        store.read_earlier([row])
        _, n = await store.update(["s1"], _bump)
        return n

    assert await store.transact(body) == 1
    assert len(sent) == 2 and "BEGIN" not in sent and "COMMIT" not in sent, sent
    assert "FOR UPDATE" not in sent[0] and "cas_states" in sent[1], sent


async def test_a_row_said_read_is_handed_to_one_update(store: SessionStore) -> None:
    """The first update swaps from the row said read; the second reads the row as the unit
    left it (not the stale object), so both land."""
    await store.create_session(session("s1"))
    row = await store.get("s1")

    async def body() -> tuple[int, int]:
        _, first = await store.update(["s1"], _bump)
        _, second = await store.update(["s1"], _bump)
        return first, second

    assert await store.transact(body, read=[row]) == (1, 2)
    assert (await store.get("s1")).metadata["n"] == 2


async def test_a_stale_row_said_read_runs_the_unit_again_on_the_row(store: SessionStore) -> None:
    """A row changed since it was read fails the swap; the unit runs again and reads it."""
    await store.create_session(session("s1"))
    stale = await store.get("s1")
    await store.update(["s1"], _bump)
    runs: list[int] = []

    async def body() -> int:
        runs.append(1)
        _, n = await store.update(["s1"], _bump)
        return n

    assert await store.transact(body, read=[stale]) == 2
    assert len(runs) == 2


@pytest.mark.postgres_only
async def test_a_body_that_needs_sqlalchemy_runs_again_whole_and_lands_once(
    pg_store: SessionStore,
) -> None:
    """A body that has read, swapped (in place, from a row said read) and queued a message
    before it asks for a statement of SQLAlchemy's: its driver-connection run is rolled back
    and the body runs again on SQLAlchemy, where the row is read again (the first run changed
    the object it was handed). Everything lands once."""
    store = pg_store
    await store.create_session(session("s1"))
    row = await store.get("s1")
    runs: list[str] = []

    async def body() -> int:
        conn = store.bound()
        runs.append(type(conn).__name__)
        store.read_earlier([row])  # the same object on both runs
        _, n = await store.update(["s1"], _bump)
        await store.append_messages("s1", None, [Message(role="user", content="once")])
        assert conn is not None
        await conn.execute(sa.text("SELECT 1"))  # SQLAlchemy's
        return n

    assert await store.transact(body) == 1
    assert runs == ["LeanTransaction", "AsyncConnection"]
    assert (await store.get("s1")).metadata["n"] == 1
    assert [m.content for m in await store.load_messages("s1")] == ["once"]


async def test_a_unit_that_only_reads_writes_nothing(store: SessionStore) -> None:
    """A unit whose body only reads commits nothing and returns what it read."""
    await store.create_session(session("s1"))

    async def body() -> str:
        return (await store.get("s1")).status

    assert await store.transact(body) == "idle"
    assert (await store.get("s1")).version == 0


def _bump_both(states: dict[str, SessionState]) -> int:
    for state in states.values():
        state.metadata["n"] = int(state.metadata.get("n", 0)) + 1
    return int(states["s1"].metadata["n"])


async def test_a_unit_that_swaps_two_rows_lands_both_or_neither(store: SessionStore) -> None:
    """A sub-agent's results commit swaps its own row and its root's, both said read. When
    the root moved since (another writer), the unit runs again: the row whose swap matched
    must not have landed alone in the lost attempt (else the rerun moves it twice)."""
    await store.create_session(session("s1"))
    await store.create_session(session("root"))
    owner, root = await store.get("s1"), await store.get("root")
    await store.update(["root"], lambda states: states["root"].metadata.update(other=1))
    runs: list[int] = []

    async def body() -> int:
        runs.append(1)
        _, n = await store.update(["s1", "root"], _bump_both)
        return n

    assert await store.transact(body, read=[owner, root]) == 1
    assert len(runs) == 2  # the stale root lost the first attempt
    assert (await store.get("s1")).metadata["n"] == 1
    assert (await store.get("root")).metadata == {"other": 1, "n": 1}
