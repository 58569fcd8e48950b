"""Notification hooks and reminders, in one process (Postgres and SQLite).

Hooks are told each event of a parked call once, with its idempotency key; a reminder is one
``client_tool.deadline_near`` log line and one ``tool_deadline_near`` stream event, fired by the
runtime itself (nothing asks for it), and none for a call answered before it was due; a hook
that raises is retried with backoff until it returns, and never fails the turn; one that
always raises is given up after ``max_attempts``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helix_dbos.errors import RequestValidationError
from helix_dbos.runtime._notifications.dispatcher import Dispatcher
from helix_dbos.runtime._notifications.hooks import Notifications
from helix_dbos.store import outbox
from helix_dbos.store.store import SessionStore
from helix_dbos.testing import capture_log_events
from tests.runtime.notify_helpers import FAST, Recorder, approve
from tests.runtime.notify_worker import gatekeeper


async def settled(
    store: SessionStore, count: int, timeout: float = 20.0, kind: str | None = None
) -> list[outbox.OutboxRow]:
    """The outbox (its rows of ``kind``) once ``count`` of them are settled (bounded
    polling of the table)."""
    async with asyncio.timeout(timeout):
        while True:
            rows = await outbox.list_rows(store, kind=kind)
            if sum(r.state != outbox.QUEUED for r in rows) >= count:
                return rows
            await asyncio.sleep(0.05)


async def test_each_event_is_told_once_with_its_key(make_runtime: Any) -> None:
    """pending, deadline_near, resolved (approved) on one call; pending and expired on
    another; a call answered before its reminder was due gets no reminder."""
    hooks = {kind: Recorder() for kind in ("pending", "deadline_near", "expired", "resolved")}
    every = Recorder()
    rt = await make_runtime([gatekeeper(timeout=4.0, remind_before=3.0)])
    # Registered after the launch (they apply from then on; before it works the same).
    rt.configure_notifications(**FAST)
    rt.on_pending(hooks["pending"])
    rt.on_deadline_near(hooks["deadline_near"])
    rt.on_expired(hooks["expired"])
    rt.on_resolved(hooks["resolved"])
    rt.on_notification(every)

    with capture_log_events() as logged:
        # A: parks, is reminded 1 s later (3 s before its 4 s deadline), then approved.
        a = (await rt.start("gatekeeper", "pay 1")).session_id
        await hooks["pending"].until(lambda: len(hooks["pending"].notes) == 1)
        await hooks["deadline_near"].until(lambda: len(hooks["deadline_near"].notes) == 1)
        [pending_a] = (await rt.status(a))["pendingToolCalls"]
        await approve(rt, a, pending_a)
        await hooks["resolved"].until(lambda: len(hooks["resolved"].notes) == 1)
        assert (await rt.wait(a))["status"] == "completed"

        # B: answered at once: its reminder, due 1 s later, is skipped. C: nobody answers:
        # reminded, then expired.
        b = (await rt.start("gatekeeper", "pay 2")).session_id
        [pending_b] = await rt.wait_for_pending(b)
        await approve(rt, b, pending_b)
        c = (await rt.start("gatekeeper", "pay 3")).session_id
        await hooks["expired"].until(lambda: len(hooks["expired"].notes) == 1)
        assert (await rt.wait(c, timeout=20))["status"] == "completed"
        rows = await settled(rt.store, 9)  # pending, deadline_near, resolved|expired: each

    approval_a = pending_a["approvalId"]
    told = {kind: [(n.key, n.attempt) for n in rec.notes] for kind, rec in hooks.items()}
    assert told["pending"][0] == (f"pending:{approval_a}", 1)
    assert told["deadline_near"][0] == (f"deadline_near:{approval_a}", 1)
    assert [n.session_id for n in hooks["deadline_near"].notes] == [a, c]
    assert told["resolved"][0] == (f"resolved:{approval_a}", 1)
    note = hooks["pending"].notes[0]
    assert (note.session_id, note.root_session_id, note.tool_name) == (a, a, "transfer")
    assert note.call_kind == "approval" and note.approval_id == approval_a
    assert note.input == {"amount": 1} and note.deadline_at == pending_a["deadlineAt"]
    assert hooks["resolved"].notes[0].outcome == "answered"
    [expired] = hooks["expired"].notes
    assert expired.session_id == c and expired.outcome == "expired"
    assert expired.on_timeout == "error" and expired.data["waitMs"] >= 4000
    # The catch-all hook saw every event the kind hooks saw, and nothing twice.
    keys = [n.key for n in every.notes]
    assert len(keys) == len(set(keys))
    assert sorted(keys) == sorted(n.key for rec in hooks.values() for n in rec.notes)

    # A's and C's reminders were streamed and logged once each; B's was skipped.
    reminders = [e for e in await rt.events(a) if e.type == "tool_deadline_near"]
    assert len(reminders) == 1
    assert reminders[0].data["approvalId"] == approval_a and reminders[0].data["remindBefore"] == 3
    assert len([e for e in await rt.events(c) if e.type == "tool_deadline_near"]) == 1
    assert not [e for e in await rt.events(b) if e.type == "tool_deadline_near"]
    logs = [e for e in logged if e["event"] == "client_tool.deadline_near"]
    assert [(e["sessionId"], e["toolName"]) for e in logs] == [(a, "transfer"), (c, "transfer")]
    by_session = {(r.session_id, r.kind): r.state for r in rows}
    assert by_session[(b, "deadline_near")] == outbox.SKIPPED
    assert by_session[(a, "deadline_near")] == by_session[(c, "deadline_near")] == "delivered"
    assert by_session[(c, "expired")] == by_session[(b, "resolved")] == "delivered"


async def test_a_hook_that_raises_is_retried_with_backoff_then_delivered(make_runtime: Any) -> None:
    """The pending hook fails twice, then returns: it is told three times, with one key and
    growing attempts; the turn is not disturbed. The resolved hook always fails: it is given
    up after ``max_attempts``."""
    rt = await make_runtime([gatekeeper()])
    flaky, broken = Recorder(fail=2), Recorder(fail=1000)
    rt.configure_notifications(**FAST, max_attempts=3)
    rt.on_pending(flaky)
    rt.on_resolved(broken)
    with capture_log_events() as logged:
        sid = (await rt.start("gatekeeper", "pay 5")).session_id
        [pending] = await rt.wait_for_pending(sid)
        await flaky.until(lambda: len(flaky.notes) == 3)
        assert (await rt.status(sid))["status"] == "suspended_client_tool"  # still parked
        await approve(rt, sid, pending)
        assert (await rt.wait(sid))["status"] == "completed"
        await broken.until(lambda: len(broken.notes) == 3)
        rows = await settled(rt.store, 2)

    key = f"pending:{pending['approvalId']}"
    assert [(n.key, n.attempt) for n in flaky.notes] == [(key, 1), (key, 2), (key, 3)]
    failures = [e for e in logged if e["event"] == "notification.hook_failed"]
    assert [(e["key"], e["attempt"]) for e in failures if e["kind"] == "pending"] == [
        (key, 1),
        (key, 2),
    ]
    assert all("ConnectionError: the mail server is down" in e["error"] for e in failures)
    # Backoff: the second pause is about twice the first (jittered 0.8-1.0).
    pauses = [e["retryInSeconds"] for e in failures if e["kind"] == "pending"]
    assert 0.04 <= pauses[0] <= 0.05 and 0.08 <= pauses[1] <= 0.1
    gave_up = [e for e in logged if e["event"] == "notification.gave_up"]
    assert [(e["kind"], e["attempt"]) for e in gave_up] == [("resolved", 3)]
    states = {r.kind: (r.state, r.attempts) for r in rows}
    assert states == {"pending": ("delivered", 3), "resolved": ("gave_up", 3)}
    assert "the mail server is down" in (
        next(r for r in rows if r.kind == "pending").last_error or ""
    )
    # Nothing of it reached the turn: no failure, the model's answer as usual.
    assert (await rt.messages(sid))[-1].content == 'tool said: {"transferred": 5}'


async def test_two_dispatchers_tell_a_reminder_once(make_runtime: Any, db_url: str) -> None:
    """A second dispatcher on the same database (SQLite: in this process; Postgres has the
    two-process test in test_notify_crash.py) races the runtime's own for each reminder: each
    reminder is streamed, logged and told once."""
    rt = await make_runtime([gatekeeper(timeout=60, remind_before=59.5)])
    mine = Recorder()
    rt.configure_notifications(poll_seconds=0.01)
    rt.on_deadline_near(mine)
    other_store = SessionStore.from_url(db_url)
    other = Dispatcher(other_store, rt.notifications)  # the same hooks: one record of calls
    other.start()
    try:
        with capture_log_events() as logged:
            sids = [(await rt.start("gatekeeper", f"pay {i}")).session_id for i in range(4)]
            await mine.until(lambda: len(mine.notes) >= 4)
            # Every reminder's row is settled: a claim of it (each counts one more attempt in
            # the row) and its stream event are in the database by then, and a settled row is
            # claimed no more.
            await settled(rt.store, 4, kind="deadline_near")
    finally:
        await other.stop()
        await other_store.close()
    assert sorted(n.session_id for n in mine.notes) == sorted(sids)
    for sid in sids:
        assert len([e for e in await rt.events(sid) if e.type == "tool_deadline_near"]) == 1
    logs = [e["sessionId"] for e in logged if e["event"] == "client_tool.deadline_near"]
    assert sorted(logs) == sorted(sids)
    rows = await outbox.list_rows(rt.store, kind="deadline_near")
    assert {(r.state, r.attempts) for r in rows} == {("delivered", 1)}


def test_hooks_and_options_are_checked() -> None:
    """An unknown kind, a hook that is not callable, an unknown or bad option: refused typed."""
    hooks = Notifications()
    assert hooks.kinds == frozenset()
    for kinds in (["sent"], []):
        with pytest.raises(RequestValidationError) as refused:
            hooks.add(print, kinds)
        assert refused.value.details["cause"] == "kinds"
    with pytest.raises(RequestValidationError):
        hooks.add("not a function")  # type: ignore[type-var]
    for option in ({"poll_seconds": 0}, {"batch_size": 2.5}, {"max_attempts": True}, {"x": 1}):
        with pytest.raises(RequestValidationError):
            hooks.configure(**option)
    assert hooks.configure(hook_timeout_seconds=5).lease == 35
    assert hooks.add(print, ["expired", "resolved"]) is print
    assert hooks.kinds == {"expired", "resolved"} and hooks.hooks_for("expired") == [print]
