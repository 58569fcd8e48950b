"""A commit in this process wakes this process's event streams of its sessions at once
(``SessionStore.on_events`` -> ``EventSignals.wake``), without waiting one NOTIFY round trip;
and only after it committed, so the woken stream reads what woke it."""

from __future__ import annotations

import psycopg
import pytest

from tests.runtime.agents import editor_agent
from tests.runtime.conftest import MakeRuntime


async def test_a_commit_here_wakes_this_process_streams_of_its_session(
    make_runtime: MakeRuntime, db_url: str
) -> None:
    runtime = await make_runtime([editor_agent()])
    if runtime.store.dialect != "postgresql":
        pytest.skip("SQLite has no NOTIFY: its streams poll")
    handle = await runtime.start("editor", "1 edit")
    sid = handle.session_id
    [call] = await runtime.wait_for_pending(sid)
    before = max(e.sequence for e in await runtime.events(sid, 0))
    store, wake = runtime.store, runtime.signals.wake
    woke: list[tuple[set[str], bool, int]] = []
    async with runtime.signals.subscribe(sid) as signal:
        assert signal is not None

        def on_events(session_ids: set[str]) -> None:
            signal.clear()  # whatever a NOTIFY did: this call alone must set it
            wake(session_ids)
            with psycopg.connect(db_url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM __agents_events WHERE session_id = %s AND sequence > %s",
                    (sid, before),
                ).fetchone()
            assert row is not None
            woke.append((set(session_ids), signal.is_set(), int(row[0])))

        store.on_events = on_events
        await runtime.submit_tool_result(sid, call["toolCallId"], result={"applied": 1})
        assert (await runtime.wait(sid))["status"] == "completed"
    assert woke, "no commit woke the streams"
    ids, was_set, committed = woke[0]  # the results commit: its tool_end
    assert ids == {sid} and was_set
    assert committed > 0  # visible from another connection when the stream was woken
