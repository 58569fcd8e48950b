"""``GET /metrics``: served by ``create_app`` and ``helix-dbos serve`` behind its own token,
included or mounted in an app of one's own, and refused when nothing authenticates it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from helix_dbos.demo import demo_agents
from helix_dbos.errors import ConfigError
from helix_dbos.http import (
    SessionTokens,
    create_app,
    create_metrics_router,
    metrics_app,
    metrics_token_auth,
)
from helix_dbos.runtime import AgentRuntime
from tests.doc_snippets import ROOT, assert_logged_turn, block_under, served, token_round_trip
from tests.http.helpers import EDIT
from tests.runtime.conftest import MakeRuntime
from tests.support.asgi import client_for

from .serving import SECRET, serve_env, serving

TOKEN = "scrape-token-0123456789abcdef"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The exposition text, parsed: (sample name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def pending_edits(text: str) -> float:
    return samples(text)[("helix_pending_client_calls", (("tool", "editContent"),))]


async def _scrape_until(client: httpx.AsyncClient, want: float, **headers: str) -> str:
    """Scrape until the pending editContent calls are ``want`` (the turn parks on its own)."""
    for _ in range(400):
        answer = await client.get("/metrics", headers=headers)
        assert answer.status_code == 200, answer.text
        if pending_edits(answer.text) == want:
            return answer.text
        await asyncio.sleep(0.025)
    raise AssertionError(f"never {want} pending editContent calls:\n{answer.text}")


async def test_create_app_serves_metrics_behind_the_metrics_token(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(demo_agents())
    app = create_app(runtime, auth_secret=SECRET, metrics_token=TOKEN)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with client_for(app) as client:
        started = await client.post("/start", json={"agentType": "editor", "message": EDIT})
        session = started.json()
        text = await _scrape_until(client, 1, **bearer)
        # Every tool that can wait is there; nothing names the session.
        assert samples(text)[("helix_pending_approvals", (("tool", "publishDocument"),))] == 0
        assert session["sessionId"] not in text

        # No token, another token, the session's own token: 401, typed.
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}):
            refused = await client.get("/metrics", headers=headers)
            assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"
        as_session = await client.get(
            "/metrics", headers={"Authorization": f"Bearer {session['token']}"}
        )
        assert as_session.status_code == 401

        answer = await client.get("/metrics", headers=bearer)
        assert answer.headers["content-type"].startswith("text/plain")
        # The client answers its call: the gauge drops, the submit is counted.
        view = (
            await client.get(
                "/status",
                params={"sessionId": session["sessionId"]},
                headers={"Authorization": f"Bearer {session['token']}"},
            )
        ).json()
        (call,) = view["pendingToolCalls"]
        submitted = await client.post(
            "/submit-tool-result",
            json={
                "sessionId": session["sessionId"],
                "toolCallId": call["toolCallId"],
                "result": {"applied": 1, "failed": 0},
            },
            headers={"Authorization": f"Bearer {session['token']}"},
        )
        assert submitted.status_code == 200, submitted.text
        text = await _scrape_until(client, 0, **bearer)
        key = ("helix_submits_total", (("answer", "new_run"), ("tool", "editContent")))
        assert samples(text)[key] == 1
    # Not in the OpenAPI document: it is the monitoring system's, not an API client's.
    assert "/metrics" not in app.openapi()["paths"]


async def test_metrics_are_open_on_an_open_server_and_refused_without_a_token(
    make_runtime: MakeRuntime,
) -> None:
    runtime = await make_runtime(demo_agents())
    async with client_for(create_app(runtime, allow_unauthenticated=True)) as client:
        assert (await client.get("/metrics")).status_code == 200
    async with client_for(create_app(runtime, auth_secret=SECRET)) as client:
        refused = await client.get("/metrics")
        assert refused.status_code == 401
        assert "HELIX_METRICS_TOKEN" in refused.json()["error"]
    # The session-token hook never lets a scrape in: a session's token is not an operator's.
    tokens = SessionTokens(SECRET)
    app = FastAPI()
    app.include_router(create_metrics_router(runtime, authenticate=tokens.authenticate))
    async with client_for(app) as client:
        as_session = {"Authorization": f"Bearer {tokens.issue('ses_someone')}"}
        assert (await client.get("/metrics", headers=as_session)).status_code == 403
    # Mounted in an app of one's own: the same route, answering at the mount's root.
    app = FastAPI()
    app.mount("/ops/metrics", metrics_app(runtime, authenticate=metrics_token_auth(TOKEN)))
    async with client_for(app) as client:
        assert (await client.get("/ops/metrics/")).status_code == 401
        mounted = await client.get("/ops/metrics/", headers={"Authorization": f"Bearer {TOKEN}"})
        assert mounted.status_code == 200
        assert "helix_oldest_pending_approval_age_seconds 0.0" in mounted.text


def test_the_metrics_route_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a hook it needs an explicit opt-out; a short token is refused, naming the
    variable it came from."""
    runtime: Any = object()  # never reached: the checks come first
    with pytest.raises(ConfigError, match="needs authentication"):
        create_metrics_router(runtime)
    with pytest.raises(ConfigError, match="at least 16"):
        metrics_token_auth("short")
    monkeypatch.setenv("HELIX_METRICS_TOKEN", "short")
    with pytest.raises(ConfigError, match="^HELIX_METRICS_TOKEN: .*at least 16"):
        create_app(AgentRuntime(demo_agents()), auth_secret=SECRET)


def test_helix_dbos_serve_serves_metrics(tmp_path: Path) -> None:
    env = serve_env(tmp_path, HELIX_AUTH_SECRET=SECRET, HELIX_METRICS_TOKEN=TOKEN)
    with serving([], env, tmp_path) as server:
        assert httpx.get(f"{server.url}/metrics", timeout=10).status_code == 401
        scraped = httpx.get(
            f"{server.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        )
        assert scraped.status_code == 200
        figures = samples(scraped.text)
        assert figures[("helix_pending_approvals", (("tool", "publishDocument"),))] == 0
        assert figures[("helix_oldest_pending_approval_age_seconds", ())] == 0


def test_the_embedding_page_metrics_app_runs(tmp_path: Path) -> None:
    """docs/embedding.md's "Metrics" program: the agent routes with session tokens, and
    /metrics behind the scrape token, counting the turn the round trip ran."""
    code = block_under(ROOT / "docs" / "embedding.md", "Metrics")
    with served(code, tmp_path, METRICS_TOKEN=TOKEN) as app:
        sid = token_round_trip(app.client)
        assert app.client.get("/metrics").status_code == 401
        scraped = app.client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert scraped.status_code == 200
        assert samples(scraped.text)[("helix_turns_total", (("outcome", "completed"),))] == 1
    assert_logged_turn(app.output(), sid)
