"""The session row's checkpoint pointer only moves forward (ARCHITECTURE.md, rule 14), on the
lean path too: there a checkpoint's pointer is a queued write (``store/batch.py``'s
``bump_states``), sent in the statement the commit flushes, with the same forward-only rule
as ``write_checkpoint``'s own UPDATE."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

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
