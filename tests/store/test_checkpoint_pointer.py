"""The session row's checkpoint pointer only moves forward (ARCHITECTURE.md, rule 14), on the
lean path too: there a checkpoint's pointer is a queued write (``store/batch.py``'s
``bump_states``), sent in the statement the commit flushes, with the same forward-only rule
as ``write_checkpoint``'s own UPDATE. And on the third path, where a step's own
compare-and-swap of its row carries the pointer (``checkpoints.pointing``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from helix_dbos.core.session import SessionState
from helix_dbos.errors import StaleStateError
from helix_dbos.store.store import SessionStore
from tests.store.store_builders import session


async def _checkpoint(store: SessionStore, checkpoint_id: str, at: datetime, step: int) -> None:
    """A checkpoint written in a lean transaction of its own (no compare-and-swap points it)."""
    await store.transact(
        lambda: store.write_checkpoint(
            "s",
            "r",
            step_count=step,
            state={},
            checkpoint_id=checkpoint_id,
            created_at=at,
        ),
    )


async def test_the_lean_checkpoint_pointer_only_moves_forward(pg_store: SessionStore) -> None:
    """A lean commit holding an older checkpoint (a slow re-execution) does not move the
    pointer back from a newer one; a newer checkpoint moves it on."""
    await pg_store.create_session(session("s"))
    now = datetime.now(UTC)
    await _checkpoint(pg_store, "new", now, 2)
    assert (await pg_store.get("s")).latest_checkpoint_id == "new"
    await _checkpoint(pg_store, "old", now - timedelta(seconds=5), 1)
    assert (await pg_store.get("s")).latest_checkpoint_id == "new"
    await _checkpoint(pg_store, "newer", now + timedelta(seconds=1), 3)
    assert (await pg_store.get("s")).latest_checkpoint_id == "newer"
    assert await pg_store.get_checkpoint("old") is not None  # written, just not pointed at


async def _swapping_step(
    store: SessionStore, session_id: str, checkpoint_id: str, read: Sequence[SessionState] = ()
) -> None:
    """A step as ``once`` commits it: its compare-and-swap of ``session_id``'s row, in a
    ``pointing`` block for its own row ``"s"``, then its checkpoint (no UPDATE of its own
    when the swap carried the pointer). ``read``: the rows it swaps from."""

    def mark(states: dict[str, SessionState]) -> None:
        states[session_id].metadata["step"] = checkpoint_id

    async def body() -> None:
        with store.pointing("s", checkpoint_id) as pointed:
            await store.update([session_id], mark)
        await store.write_checkpoint(
            "s", "r", step_count=1, state={}, checkpoint_id=checkpoint_id, pointed=pointed.done
        )

    await store.transact(body, read=read, attempts=1)


async def test_the_pointer_a_compare_and_swap_carries_only_moves_forward(
    store: SessionStore,
) -> None:
    """A step holding the row as it was before a newer step committed (a slow re-execution
    handed its row earlier) loses its swap, and the pointer it carries with it: the row
    keeps pointing at the newer checkpoint, and the older one is not written. A swap of
    another row carries no pointer: the step's checkpoint then moves its own row's pointer
    forward, and the other row points at nothing."""
    await store.create_session(session("s"))
    await store.create_session(session("t"))
    before = await store.get("s")
    await _swapping_step(store, "s", "new")
    assert (await store.get("s")).latest_checkpoint_id == "new"
    with pytest.raises(StaleStateError):
        await _swapping_step(store, "s", "old", read=[before])
    assert (await store.get("s")).latest_checkpoint_id == "new"
    assert await store.get_checkpoint("old") is None
    await _swapping_step(store, "t", "beside")
    assert (await store.get("t")).latest_checkpoint_id is None
    assert (await store.get("s")).latest_checkpoint_id == "beside"


async def _written(store: SessionStore, session_id: str, checkpoint_id: str, at: datetime) -> None:
    """A checkpoint of ``session_id`` written in a transaction of its own."""
    await store.transact(
        lambda: store.write_checkpoint(
            session_id, "r", step_count=1, state={}, checkpoint_id=checkpoint_id, created_at=at
        )
    )


async def test_only_the_checkpoint_a_row_points_at_holds_its_pointer_back(
    store: SessionStore,
) -> None:
    """What holds the pointer back is the checkpoint the row points at: not a newer
    checkpoint of another session. A checkpoint as new as the one pointed at moves it (the
    later write wins a tie)."""
    await store.create_session(session("s"))
    await store.create_session(session("o"))
    now = datetime.now(UTC)
    await _written(store, "o", "other", now + timedelta(seconds=10))
    await _written(store, "s", "a", now)
    await _written(store, "s", "b", now + timedelta(seconds=1))
    assert (await store.get("s")).latest_checkpoint_id == "b"
    await _written(store, "s", "tie", now + timedelta(seconds=1))
    assert (await store.get("s")).latest_checkpoint_id == "tie"
    assert (await store.get("o")).latest_checkpoint_id == "other"


async def test_a_checkpoint_written_in_a_transaction_is_read_back_whole_in_it(
    store: SessionStore,
) -> None:
    """A checkpoint written in a transaction (queued, on Postgres) keeps its run and message
    count, and the transaction reads it as the one its row points at."""
    await store.create_session(session("s"))

    async def write_then_read() -> dict[str, Any] | None:
        await store.write_checkpoint(
            "s", "run_1", step_count=3, state={"k": 1}, message_count=7, checkpoint_id="cp"
        )
        return await store.latest_checkpoint("s")

    seen = await store.transact(write_then_read)
    assert seen is not None
    assert (seen["checkpoint_id"], seen["run_id"], seen["message_count"]) == ("cp", "run_1", 7)
    stored = await store.get_checkpoint("cp")
    assert stored is not None
    assert (stored["run_id"], stored["message_count"], stored["step_count"]) == ("run_1", 7, 3)
