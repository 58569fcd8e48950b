"""``/interrupt`` racing answers, through ``helix-dbos serve`` on Postgres.

Each session starts an ``editor`` turn, waits until it parks on ``editContent``, then sends
the answer and an interrupt at nearly the same time (the interrupt mostly a few ms after, into
the turn's continuation). Half the sessions ask to publish, so their continuation parks again
on the ``publishDocument`` approval instead of completing.

The server runs on a private cluster (``cluster_url``): a shared server's connection limit
would fail turns for a reason that is not the race.

A recorded stop wins over everything in flight: whatever order an interrupt and a submit
land in, the session ends (never stays active on a cancelled workflow), a turn whose
interrupt answered ``interrupted`` never completes afterwards, and the next ``/start`` works.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helix_dbos.runtime import names

from .serve import (
    ACTIVE,
    ENDED,
    Answer,
    Client,
    ServeProcess,
    answer_body,
    check_database,
    log_time,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres_only]

#: Sessions in the race test; every other one races an approval instead of a client result.
RACES = 100
#: How long a session may take to settle after the race before it counts as stuck.
SETTLE_SECONDS = 20.0
#: Each model call takes this long (like a fast real model), so stops land mid call too.
MODEL_DELAY_MS = 300
#: How long after the session looks ended its status is read again (in-flight work landed).
GRACE_SECONDS = 1.5
#: A message the demo editor answers with an editContent call.
EDIT = 'replace "teh" with "the"'
#: How long each model call takes in the test of a stop during one.
MODEL_CALL_SECONDS = 3


async def _wait_pending(client: Client, sid: str, tool: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        view = await client.status(sid)
        for pending in view["pendingToolCalls"]:
            if pending["toolName"] == tool and pending.get("submittedAt") is None:
                return dict(pending)
        assert view["status"] not in ENDED, f"{sid} ended before {tool}: {json.dumps(view)}"
        assert time.monotonic() < deadline, f"{sid} never waited on {tool}"
        await asyncio.sleep(0.05)


async def _settle(client: Client, sid: str) -> str:
    """The session's status once it has ended and whatever was in flight has landed."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        status = str((await client.status(sid))["status"])
        if status not in ACTIVE:
            # A step that was running when the stop landed returns within a model call
            # (MODEL_DELAY_MS) and commits quickly: well within the grace. Read it again.
            await asyncio.sleep(GRACE_SECONDS)
            status = str((await client.status(sid))["status"])
            if status not in ACTIVE:
                return status
        if time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.1)


def _workflow_status(database_url: str, sid: str) -> str | None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            'SELECT w.status FROM "__agents_states" s LEFT JOIN dbos.workflow_status w '
            "ON w.workflow_uuid = s.workflow_id WHERE s.session_id = %s",
            (sid,),
        ).fetchone()
    return row[0] if row else None


async def _race_one(
    index: int, client: Client, rng: random.Random, database_url: str, out: dict[str, Any]
) -> None:
    approvals = index % 2 == 1
    message = 'replace "teh" with "the"' + (" and publish" if approvals else "")
    started = await client.request(
        "POST", "/start", json_body={"agentType": "editor", "message": message}
    )
    assert started.status_code == 200, started.text
    sid = started.json()["sessionId"]
    # The race is on the edit's answer: it wakes the turn, which continues (collects the
    # answer, runs the model, then completes or parks on the approval) while the stop lands.
    edit = await _wait_pending(client, sid, "editContent")
    kind, payload, body = answer_body(sid, edit)
    answer = Answer(sid, edit["toolCallId"], kind, payload)
    # Mostly interrupt after the submit, somewhere in the continuation (its wake-up, the
    # answers' commit, the model call, the commit of its answer); sometimes before.
    offset = rng.uniform(-0.02, MODEL_DELAY_MS / 1000 * 2)

    async def submit() -> None:
        await asyncio.sleep(max(0.0, -offset))
        await client.submit(answer, body)

    async def interrupt() -> str:
        await asyncio.sleep(max(0.0, offset))
        response = await client.request("POST", "/interrupt", json_body={"sessionId": sid})
        return str(response.json().get("status")) if response.status_code == 200 else "error"

    _, interrupt_said = await asyncio.gather(submit(), interrupt())
    final = await _settle(client, sid)
    stuck_on = _workflow_status(database_url, sid) if final in ACTIVE else None
    again = await client.request(
        "POST", "/start", json_body={"agentType": "editor", "message": EDIT, "sessionId": sid}
    )
    if again.status_code == 200:
        await _wait_pending(client, sid, "editContent")
        await client.request("POST", "/interrupt", json_body={"sessionId": sid})
    out[sid] = {
        "approvals": approvals,
        "interrupt": interrupt_said,
        "submit": answer.answers[-1],
        "final": final,
        "stuck_on": stuck_on,
        "next_start": again.status_code,
        "answer": answer,
    }


async def test_interrupt_racing_submits_leaves_nothing_stuck(
    cluster_url: str, tmp_path: Path
) -> None:
    """100 sessions (half with approvals): 0 stuck, 0 interrupted turns that complete,
    0 runs with two turn_end events, 0 accepted answers on a stuck session, and the next
    ``/start`` of every session answers 200."""
    server = ServeProcess(
        cluster_url, tmp_path, env={"HELIX_DEMO_MODEL_DELAY_MS": str(MODEL_DELAY_MS)}
    )
    server.start()
    client = Client(server.base_url)
    rng = random.Random()
    out: dict[str, Any] = {}
    gate = asyncio.Semaphore(20)

    async def one(i: int) -> None:
        async with gate:
            await _race_one(i, client, rng, cluster_url, out)

    try:
        await asyncio.gather(*(one(i) for i in range(RACES)))
    finally:
        await client.close()
        server.stop()
    found = check_database(cluster_url, list(out))
    stuck = {sid: r for sid, r in out.items() if r["final"] in ACTIVE}
    interrupted_but_completed = [
        sid
        for sid, r in out.items()
        if r["interrupt"] == "interrupted" and r["final"] == "completed"
    ]
    phantom_accepts = [sid for sid, r in stuck.items() if r["submit"] == "accepted"]
    start_refused = [sid for sid, r in out.items() if r["next_start"] != 200]
    figures = {
        "sessions": len(out),
        "interrupt_answers": _count(r["interrupt"] for r in out.values()),
        "submit_answers": _count(r["submit"] for r in out.values()),
        "final_statuses": _count(r["final"] for r in out.values()),
        "stuck": len(stuck),
        "stuck_workflows": _count(str(r["stuck_on"]) for r in stuck.values()),
        "interrupted_but_completed": len(interrupted_but_completed),
        "runs_with_two_turn_ends": len(found.double_turn_end),
        "accepted_on_stuck_session": len(phantom_accepts),
        "next_start_refused": len(start_refused),
        "duplicate_tool_results": len(found.duplicate_tool_results),
        "http_500": len(client.internal_errors),
    }
    text = json.dumps(figures, indent=1)
    print(text)
    assert not stuck, text
    assert not interrupted_but_completed, text
    assert not found.double_turn_end, text
    assert not start_refused, text
    assert not found.duplicate_tool_results, text
    assert not client.internal_errors, text


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


async def test_interrupt_during_a_running_model_step(cluster_url: str, tmp_path: Path) -> None:
    """A model call that takes 3 s is interrupted while it runs: the turn ends
    ``interrupted`` and stays so after the call returns (no pending call, no ownership, no
    answer of the model, one ``turn_end``), and the next ``/start`` runs a full turn."""
    server = ServeProcess(
        cluster_url, tmp_path, env={"HELIX_DEMO_MODEL_DELAY_MS": str(MODEL_CALL_SECONDS * 1000)}
    )
    server.start()
    client = Client(server.base_url)
    try:
        sent_at = time.time()
        started = await client.request(
            "POST", "/start", json_body={"agentType": "editor", "message": EDIT}
        )
        assert started.status_code == 200, started.text
        sid, run_id = started.json()["sessionId"], started.json()["runId"]
        # The first model step starts from the committed entry before /start answers
        # (``handover``): the model call runs already, for 3 s.
        stopped = await client.request("POST", "/interrupt", json_body={"sessionId": sid})
        assert stopped.status_code == 200 and stopped.json()["status"] == "interrupted"
        # The stopped turn's workflow ends once its step has returned from the model call and
        # tried its commit; DBOS, finding it cancelled, records no outcome and says so.
        ended = await asyncio.to_thread(
            server.wait_for_log,
            f"Workflow {names.turn_workflow_id(sid, run_id)} outcome was not recorded",
        )
        assert log_time(ended) - sent_at >= MODEL_CALL_SECONDS - 0.01, "no model call ran"
        view = await client.status(sid)
        assert view["status"] == "interrupted", view
        assert view["pendingToolCalls"] == [], view
        with psycopg.connect(cluster_url, autocommit=True) as conn:
            row = conn.execute(
                'SELECT client_tool_call_ownership FROM "__agents_states" WHERE session_id = %s',
                (sid,),
            ).fetchone()
            turn_ends = conn.execute(
                'SELECT count(*) FROM "__agents_events" '
                "WHERE session_id = %s AND run_id = %s AND type = 'turn_end'",
                (sid, run_id),
            ).fetchone()
            roles = conn.execute(
                'SELECT role FROM "__agents_messages" WHERE session_id = %s ORDER BY message_id',
                (sid,),
            ).fetchall()
        assert row is not None and row[0] == {}, row
        assert turn_ends is not None and turn_ends[0] == 1, turn_ends
        assert [r[0] for r in roles] == ["user"], roles  # the stop came before the answer

        again = await client.request(
            "POST",
            "/start",
            json_body={"agentType": "editor", "message": EDIT, "sessionId": sid},
        )
        assert again.status_code == 200, again.text
        pending = await _wait_pending(client, sid, "editContent")
        kind, payload, body = answer_body(sid, pending)
        answer = Answer(sid, pending["toolCallId"], kind, payload)
        await client.submit(answer, body)
        assert answer.answers == ["accepted"], answer.answers
        deadline = time.monotonic() + 60
        while (status := (await client.status(sid))["status"]) != "completed":
            assert status in ACTIVE, status
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        found = check_database(cluster_url, [sid], [answer])
        assert not found.lost_answers and not found.duplicate_tool_results, str(found)
    finally:
        await client.close()
        server.stop()
