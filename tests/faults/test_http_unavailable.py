"""While the database is unreachable, every route of ``helix-dbos serve`` answers 503
``store_unavailable`` (retryable, with ``Retry-After``) and no driver text; once it is back,
the same requests succeed.

The server runs on a private Postgres cluster that the test stops (immediate: every
connection drops, like a crash of the database host) and starts again.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from helix_dbos.errors import STORE_UNAVAILABLE_MESSAGE

from .pgcluster import PrivateCluster
from .serve import DRIVER_WORDS, ServeProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.postgres_only]

#: A message the demo editor answers with an editContent call (the turn parks on it).
EDIT = 'replace "teh" with "the"'


def _requests(sid: str, call_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        ("GET", "/status", {"params": {"sessionId": sid}}),
        ("GET", "/sse", {"params": {"sessionId": sid}}),
        ("POST", "/start", {"json": {"agentType": "editor", "message": "hello"}}),
        ("POST", "/start", {"json": {"agentType": "editor", "message": "again", "sessionId": sid}}),
        (
            "POST",
            "/submit-tool-result",
            {
                "json": {
                    "sessionId": sid,
                    "toolCallId": call_id,
                    "result": {"applied": 1, "failed": 0},
                }
            },
        ),
        (
            "POST",
            f"/chat/{sid}/submit-tool-result",
            {"json": {"toolCallId": call_id, "result": {"applied": 1, "failed": 0}}},
        ),
        ("POST", "/resume", {"json": {"sessionId": sid, "mode": "continue"}}),
        ("POST", "/interrupt", {"json": {"sessionId": sid}}),
        ("POST", "/abort", {"json": {"sessionId": sid}}),
        ("GET", f"/chat/{sid}/stream", {}),
        (
            "POST",
            "/chat",
            {
                "json": {
                    "id": f"{sid}-chat",
                    "messages": [
                        {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
                    ],
                }
            },
        ),
    ]


def _assert_unavailable(response: Any, label: str) -> None:
    assert response.status_code == 503, (label, response.status_code, response.text[:300])
    body = response.json()
    assert body == {
        "error": STORE_UNAVAILABLE_MESSAGE,
        "code": "store_unavailable",
        "retryable": True,
        "retryAfterSeconds": 2,
    }, (label, body)
    assert response.headers["Retry-After"] == "2", label
    for word in DRIVER_WORDS:
        assert word not in response.text, (label, word, response.text)


def _status(client: httpx.Client, sid: str) -> dict[str, Any]:
    """The session's status, waiting out 503s (the database may still be starting)."""
    deadline = time.monotonic() + 60
    while (response := client.get("/status", params={"sessionId": sid})).status_code == 503:
        assert time.monotonic() < deadline, "the store stayed unavailable"
        time.sleep(0.2)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _park(client: httpx.Client) -> tuple[str, str]:
    """Start an editor turn and wait until it parks on its editContent call."""
    started = client.post("/start", json={"agentType": "editor", "message": EDIT})
    assert started.status_code == 200, started.text
    sid = started.json()["sessionId"]
    deadline = time.monotonic() + 30
    while not (
        pending := client.get("/status", params={"sessionId": sid}).json()["pendingToolCalls"]
    ):
        assert time.monotonic() < deadline, "the turn did not park"
        time.sleep(0.05)
    return sid, pending[0]["toolCallId"]


def test_every_route_answers_503_while_the_database_is_down(
    cluster: PrivateCluster, cluster_url: str, tmp_path: Path
) -> None:
    """Stop the database under a running server: each route answers 503 store_unavailable;
    start it again: the next request is served without a server restart."""
    server = ServeProcess(cluster_url, tmp_path)
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            sid, call_id = _park(client)
            cluster.stop()
            try:
                for method, path, kwargs in _requests(sid, call_id):
                    response = client.request(method, path, **kwargs)
                    _assert_unavailable(response, f"{method} {path}")
            finally:
                cluster.start()
            view = client.get("/status", params={"sessionId": sid})
            assert view.status_code == 200, view.text
    finally:
        server.stop()


def test_a_parked_turn_survives_an_outage(
    cluster: PrivateCluster, cluster_url: str, tmp_path: Path
) -> None:
    """A turn parked through a 5 s database outage still waits on its call afterwards; the
    answer is accepted and the turn completes with it."""
    server = ServeProcess(cluster_url, tmp_path)
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            sid, call_id = _park(client)
            cluster.stop()
            time.sleep(5)
            cluster.start()
            view = _status(client, sid)
            assert view["status"] == "suspended_client_tool", view
            assert [p["toolCallId"] for p in view["pendingToolCalls"]] == [call_id], view
            result = {"applied": 1, "failed": 0}
            submitted = client.post(
                "/submit-tool-result",
                json={"sessionId": sid, "toolCallId": call_id, "result": result},
            )
            assert submitted.status_code == 200, submitted.text
            assert submitted.json()["status"] == "accepted", submitted.text
            deadline = time.monotonic() + 60
            while (view := _status(client, sid))["status"] != "completed":
                assert view["status"] not in ("failed", "interrupted"), view
                assert time.monotonic() < deadline, f"the turn did not complete: {view}"
                time.sleep(0.1)
    finally:
        server.stop()


def test_an_open_stream_rides_out_a_short_outage(
    cluster: PrivateCluster, cluster_url: str, tmp_path: Path
) -> None:
    """``GET /sse`` open on a turn whose model call takes 3 s; the database stops for 2 s
    meanwhile. The stream neither breaks nor gives up: it goes on to the turn's next events
    and ends after a terminal one (``suspended`` or ``turn_end``), with every sequence once."""
    server = ServeProcess(cluster_url, tmp_path, env={"HELIX_DEMO_MODEL_DELAY_MS": "3000"})
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            started = client.post("/start", json={"agentType": "editor", "message": EDIT})
            assert started.status_code == 200, started.text
            sid = started.json()["sessionId"]
            frames: list[str] = []
            with client.stream("GET", "/sse", params={"sessionId": sid}) as stream:
                assert stream.status_code == 200
                lines = stream.iter_lines()
                for line in lines:
                    frames.append(line)
                    if line.startswith("data:") and '"turn_start"' in line:
                        break
                cluster.stop()
                time.sleep(2)
                cluster.start()
                # The turn parks or ends within seconds; keep-alives (every 15 s) bound the
                # wait of a stream that never ends.
                deadline = time.monotonic() + 40
                for line in lines:
                    frames.append(line)
                    if time.monotonic() > deadline:
                        break
    finally:
        server.stop()
    events = [json.loads(f.removeprefix("data: ")) for f in frames if f.startswith("data:")]
    assert not any(f.startswith("retry:") for f in frames), frames  # it did not give up
    assert events and events[-1]["type"] in ("suspended", "turn_end"), (events, frames[-5:])
    sequences = [e["sequence"] for e in events]
    assert sequences == sorted(set(sequences)), sequences


def test_an_apps_own_routes_answer_store_unavailable_too() -> None:
    """``install_error_handlers`` maps database errors of an app's own routes: a transient one
    (a refused connection) is the typed 503 with ``Retry-After``, any other (a constraint) the
    typed 500; neither carries driver text."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from helix_dbos.http import install_error_handlers

    app = FastAPI()
    install_error_handlers(app)

    @app.get("/refused")
    def refused() -> None:
        psycopg.connect(f"postgresql://postgres@127.0.0.1:{free_port()}/x", connect_timeout=5)

    @app.get("/constraint")
    def constraint() -> None:
        conn = sqlite3.connect(":memory:")
        conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("INSERT INTO t VALUES (1)")

    with TestClient(app, raise_server_exceptions=False) as client:
        _assert_unavailable(client.get("/refused"), "GET /refused")
        internal = client.get("/constraint")
        assert internal.status_code == 500
        assert internal.json() == {
            "error": "The server failed to handle the request",
            "code": "framework_internal_error",
            "retryable": False,
        }
