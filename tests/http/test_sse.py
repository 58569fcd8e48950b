"""GET /sse: ids are sequences, a resume loses and repeats nothing, pending calls are re-sent;
an open stream waits on its session's NOTIFY without a query."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import psycopg
import pytest

from helix_dbos.core.clock import now_ms
from helix_dbos.core.session import SessionState
from helix_dbos.http import sse

from .conftest import HttpServer
from .helpers import Frame, read_sse, start_parked, wait_status


def ids(frames: list[Frame]) -> list[int]:
    return [f.id for f in frames if f.id is not None]


def test_stream_ends_when_the_turn_parks_then_when_it_ends(client: httpx.Client) -> None:
    """A fresh stream replays the turn and ends at the park; after the answer, a stream from
    the last id carries the continuation and ends at turn_end."""
    parked = start_parked(client)
    sid = parked["sessionId"]
    first = read_sse(client, sid)
    assert [f.type for f in first] == ["turn_start", "user_message", "tool_start", "suspended"]
    assert ids(first) == [1, 2, 3, 4]
    assert all(f.data["sessionId"] == sid and f.data["sequence"] == f.id for f in first)
    assert first[2].data["data"]["toolCallId"] == parked["toolCallId"]

    client.post(
        "/submit-tool-result",
        json={
            "sessionId": sid,
            "toolCallId": parked["toolCallId"],
            "result": {"applied": 3, "failed": 0},
        },
    )
    rest = read_sse(client, sid, last_event_id=ids(first)[-1])
    assert [f.type for f in rest if f.id is not None] == [
        "tool_end",
        "text_delta",
        "text",
        "turn_end",
    ]
    assert rest[-1].data["data"]["text"] == "Applied 3 edits."
    assert ids(first) + ids(rest) == list(range(1, len(first) + len(rest) + 1))


def test_resume_from_last_event_id_has_no_gap_and_no_duplicate(client: httpx.Client) -> None:
    """From every point of a finished stream, Last-Event-ID and fromSequence resume exactly
    after it."""
    parked = start_parked(client, 'replace "a" with "b" and publish document d-9')
    sid = parked["sessionId"]
    client.post(
        "/submit-tool-result",
        json={
            "sessionId": sid,
            "toolCallId": parked["toolCallId"],
            "result": {"applied": 1, "failed": 0},
        },
    )
    view = wait_status(client, sid, "suspended_client_tool")
    approval = view["pendingToolCalls"][0]
    client.post(
        "/submit-tool-result",
        json={
            "kind": "approval-response",
            "sessionId": sid,
            "toolCallId": approval["toolCallId"],
            "approvalId": approval["approvalId"],
            "approved": True,
        },
    )
    wait_status(client, sid, "completed")

    full = ids(read_sse(client, sid))
    assert full == list(range(1, len(full) + 1))
    for last in (1, 4, len(full) - 1, len(full)):
        by_header = read_sse(client, sid, last_event_id=last)
        by_query = read_sse(client, sid, from_sequence=last + 1)
        assert full[:last] + ids(by_header) == full
        assert ids(by_query) == ids(by_header)
        # The session waits on nothing: no pending frame on a reconnect.
        assert all(f.id is not None for f in by_header)


def test_reconnect_to_a_parked_session_resends_the_pending_calls(client: httpx.Client) -> None:
    """A reconnect after the tool_start re-sends the waiting calls as a `pending` frame without
    an id, and then ends (still parked)."""
    parked = start_parked(client)
    sid = parked["sessionId"]
    first = read_sse(client, sid)
    again = read_sse(client, sid, last_event_id=ids(first)[-1])
    assert len(again) == 1
    (pending,) = again
    assert pending.id is None and pending.type == "pending"
    calls = pending.data["data"]["toolCalls"]
    assert [c["toolCallId"] for c in calls] == [parked["toolCallId"]]
    assert calls[0]["toolName"] == "editContent" and calls[0]["input"]
    client.post("/interrupt", json={"sessionId": sid})


def test_stream_waits_for_a_turn_that_is_still_running(client: httpx.Client) -> None:
    """Opened right after the answer is stored, the stream stays open until the turn ends."""
    parked = start_parked(client)
    sid = parked["sessionId"]
    client.post(
        "/submit-tool-result",
        json={
            "sessionId": sid,
            "toolCallId": parked["toolCallId"],
            "result": {"applied": 0, "failed": 2},
        },
    )
    frames = read_sse(client, sid, last_event_id=4)
    assert frames[-1].type == "turn_end"
    assert frames[-1].data["data"]["text"] == "Applied 0 edits. 2 edits failed."


@contextmanager
def statements_naming(http_server: HttpServer, session_id: str) -> Iterator[list[str]]:
    """Every statement the server's psycopg cursors send, meanwhile, whose parameters name the
    session: SQLAlchemy's and those the store sends on the driver connection itself. The
    reconciler's statements (its own schedule, not the stream's) are left out: its paged
    listing, and its lookup of the sessions of PENDING workflows by workflow id."""
    seen: list[str] = []
    original = psycopg.AsyncCursor.execute

    async def record(self: Any, query: Any, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else repr(query)
        reconciler = (
            "ORDER BY __agents_states.updated_at" in text
            or "__agents_states.workflow_id IN" in text
        )
        if session_id in repr(params) and not reconciler:
            seen.append(text)
        return await original(self, query, params, *args, **kwargs)

    psycopg.AsyncCursor.execute = record  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        psycopg.AsyncCursor.execute = original  # type: ignore[method-assign]


def answered_without_wake_up(http_server: HttpServer, client: httpx.Client) -> str:
    """A parked session whose call is marked answered but whose turn was not woken: the
    status says the turn continues, and nothing moves (a stream of it waits)."""
    parked = start_parked(client)
    sid, tcid = parked["sessionId"], parked["toolCallId"]

    def mark(states: dict[str, SessionState]) -> None:
        entry = states[sid].pending[tcid]
        entry.submitted_at = now_ms()
        entry.response = {"result": {"applied": 1, "failed": 0}}

    http_server.run(http_server.runtime.store.update([sid], mark))
    return str(sid)


#: The streams' heartbeat in the tests below: an idle stream sends its keep-alive this long
#: after its last frame, ten times the 50 ms a polling stream waits between two reads.
HEARTBEAT_SECONDS = 0.5


@pytest.fixture
def quick_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's streams send their keep-alive every ``HEARTBEAT_SECONDS``."""
    monkeypatch.setattr(sse, "HEARTBEAT_SECONDS", HEARTBEAT_SECONDS)


def next_keep_alive(lines: Iterator[str]) -> None:
    """Read the stream up to its next keep-alive: its wait for the session's events timed out,
    so it had read all it reads and has waited since, idle, for one heartbeat."""
    assert next((line for line in lines if line == ": keep-alive"), None), "the stream ended"


@pytest.mark.usefixtures("quick_heartbeat")
def test_attaching_reads_the_status_once_and_the_events_once(
    client: httpx.Client, http_server: HttpServer
) -> None:
    """A stream attached after an answer reads the status view once (for its 404, its pending
    frame and its end check) and the events once, then waits."""
    sid = answered_without_wake_up(http_server, client)
    with statements_naming(http_server, sid) as seen:
        http_server.run(http_server.runtime.status(sid))
    status_reads = len(seen)
    assert status_reads >= 1
    with (
        statements_naming(http_server, sid) as seen,
        client.stream("GET", "/sse", params={"sessionId": sid, "fromSequence": 5}) as response,
    ):
        assert response.status_code == 200
        next_keep_alive(response.iter_lines())  # the attach has read all it reads, and waits
        assert len(seen) == status_reads + 1, seen
        assert "__agents_events" in seen[-1]
    client.post("/interrupt", json={"sessionId": sid})


@pytest.mark.usefixtures("quick_heartbeat")
def test_an_idle_stream_runs_no_statement_and_a_commit_wakes_it(
    client: httpx.Client, http_server: HttpServer
) -> None:
    """While the turn does not move, the open stream runs no statement naming its session (a
    poll would read every 50 ms); an event committed from another connection reaches it
    through the NOTIFY."""
    sid = answered_without_wake_up(http_server, client)
    signals = http_server.runtime.signals
    sequence = 1_000_000  # beyond the session's own counter: the cleanup's events never clash
    with (
        statements_naming(http_server, sid) as seen,
        client.stream("GET", "/sse", params={"sessionId": sid, "fromSequence": 5}) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        next_keep_alive(lines)  # the stream has read the status and the events, and waits
        settled = len(seen)
        assert settled >= 2, seen
        next_keep_alive(lines)  # one more heartbeat, idle
        assert seen[settled:] == [], "an idle stream ran statements"
        notified = signals.notifications
        with psycopg.connect(http_server.database_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO __agents_events (session_id, sequence, type, data, created_at) "
                "VALUES (%s, %s, 'probe', '{}', now())",
                (sid, sequence),
            )
        assert next(line for line in lines if line.startswith("id:")) == f"id: {sequence}"
        assert signals.notifications > notified
        assert any("__agents_events" in q for q in seen[settled:])
    with psycopg.connect(http_server.database_url, autocommit=True) as conn:
        conn.execute(
            "DELETE FROM __agents_events WHERE session_id = %s AND sequence = %s", (sid, sequence)
        )
    client.post("/interrupt", json={"sessionId": sid})
