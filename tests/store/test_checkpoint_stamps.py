"""A checkpoint is stamped with its instant in UTC, whatever the host's time zone.

The tests run with the process's zone set to Tokyo (``TZ``, ``time.tzset``), as on a host not
set to UTC. A stamp in local time would read back nine hours off, and on SQLite (which keeps a
time without its offset) it would also hold the session's checkpoint pointer back: rule 14
compares the stamps, and a later checkpoint would look older than one stamped in local time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from helix_dbos.store.store import SessionStore
from tests.store.store_builders import session


def _utc(value: datetime) -> datetime:
    # SQLite reads a time back without its offset; what the store writes is UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@pytest.mark.usefixtures("tokyo")
async def test_a_checkpoint_is_stamped_in_utc_on_a_host_not_set_to_utc(store: SessionStore) -> None:
    """A checkpoint written without a stamp (every commit's) reads back as the instant it was
    written, in UTC."""
    await store.create_session(session("s"))
    before = datetime.now(UTC)
    await store.write_checkpoint("s", "r", step_count=1, state={}, checkpoint_id="cp")
    after = datetime.now(UTC)
    written = await store.get_checkpoint("cp")
    assert written is not None
    assert (
        before - timedelta(seconds=1) <= _utc(written["created_at"]) <= after + timedelta(seconds=1)
    ), written["created_at"]


@pytest.mark.usefixtures("tokyo")
async def test_a_stamp_given_in_local_time_is_kept_as_its_instant(store: SessionStore) -> None:
    """A stamp given in the host's zone is kept as its instant: it reads back in UTC, and a
    checkpoint stamped later in UTC still takes the pointer (rule 14)."""
    await store.create_session(session("s"))
    local = datetime.now().astimezone() - timedelta(seconds=5)
    await store.write_checkpoint(
        "s", "r", step_count=1, state={}, checkpoint_id="local", created_at=local
    )
    await store.write_checkpoint(
        "s", "r", step_count=2, state={}, checkpoint_id="later", created_at=datetime.now(UTC)
    )
    written = await store.get_checkpoint("local")
    assert written is not None
    assert _utc(written["created_at"]) == local.astimezone(UTC)
    assert (await store.get("s")).latest_checkpoint_id == "later"


async def test_a_stamp_without_a_zone_is_refused(store: SessionStore) -> None:
    """A naive stamp names no instant (local time? UTC?): refused, naming the field."""
    await store.create_session(session("s"))
    with pytest.raises(ValueError, match="created_at"):
        await store.write_checkpoint(
            "s", "r", step_count=1, state={}, checkpoint_id="cp", created_at=datetime(2026, 1, 1)
        )
    assert await store.get_checkpoint("cp") is None
