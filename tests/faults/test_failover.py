"""A database failover loses nothing: a primary with a synchronous streaming standby (two
private clusters made here), ``helix-dbos serve`` on a URL naming both with
``target_session_attrs=read-write``. With turns mid model step, parked live, hibernated and
answers arriving, the primary is stopped hard and the standby promoted. Then every answer that
got a 2xx is applied once, every turn ends, nothing stays stuck, no request answered 500, and
the server reconnected by itself; during the gap clients got 503 ``store_unavailable``
(retryable, with ``Retry-After``), and the server logged it.

The synchronous standby is what makes "a 2xx answer is never lost" true: a commit returns
only once the standby has flushed it. With an asynchronous standby, commits acknowledged in
the last moments before the primary died may be missing after the promotion.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from .pgcluster import PRIMARY_CONF, PrivateCluster, pg_available, standby_of
from .serve import Answer, Client, EditorUser, ServeProcess, check_database, editor_message

pytestmark = [pytest.mark.slow, pytest.mark.postgres_only]

TURNS = 40
MODEL_DELAY_MS = 1500
#: Seconds between the primary's hard stop and the standby's promotion.
GAP_SECONDS = 8.0


class TimedClient(Client):
    """``Client`` that also records when each 503 arrived."""

    def __init__(self, base_url: str, *, patience: float) -> None:
        super().__init__(base_url, patience=patience)
        self.unavailable_at: list[float] = []
        send = self.http.request

        async def request(*args: Any, **kwargs: Any) -> httpx.Response:
            response = await send(*args, **kwargs)
            if response.status_code == 503:
                self.unavailable_at.append(time.monotonic())
            return response

        self.http.request = request  # type: ignore[method-assign]


@pytest.mark.timeout(600)
async def test_a_promoted_standby_loses_no_accepted_answer(tmp_path: Path) -> None:
    if not pg_available():
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    with PrivateCluster.create(PRIMARY_CONF) as primary, standby_of(primary) as standby:
        name = primary.create_database().rpartition("/")[2]
        url = (
            f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/{name}"
            "?target_session_attrs=read-write"
        )
        figures = await _run(primary, standby, url, tmp_path)
    print(json.dumps(figures, indent=1, default=str))
    text = json.dumps(figures, default=str)
    assert figures["answers_lost"] == 0, text
    assert figures["duplicate_tool_results"] == 0, text
    assert figures["not_ended"] == 0 and figures["active_without_workflow"] == 0, text
    assert figures["http_500_answers"] == 0, text
    assert figures["statuses"] == {"completed": TURNS}, text
    assert 503 in figures["probe_answers"], text
    assert figures["probe_503_code"] == "store_unavailable", text
    assert figures["probe_503_retry_after"], text
    assert figures["continuations_of_hibernated_turns"] > 0, text
    assert figures["server_logged_store_unavailable"], text
    assert figures["running_at_stop"] + figures["suspended_at_stop"] > 0, text


def _hibernated(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM __agents_states WHERE metadata ? 'hibernated'"
        ).fetchone()
    return int(row[0]) if row else 0


def _continuations(url: str) -> int:
    """Hibernated turns continued (their continuation workflows, on the promoted server)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM dbos.workflow_status WHERE name = 'helix.turn.continue'"
        ).fetchone()
    return int(row[0]) if row else 0


async def _run(
    primary: PrivateCluster, standby: PrivateCluster, url: str, tmp_path: Path
) -> dict[str, Any]:
    server = ServeProcess(
        url,
        tmp_path,
        env={
            "HELIX_DEMO_MODEL_DELAY_MS": str(MODEL_DELAY_MS),
            # Some answered turns wait long enough to hibernate, others are answered hot.
            "HELIX_HIBERNATE_AFTER_SECONDS": "0.5",
        },
    )
    server.start()
    client = TimedClient(server.base_url, patience=300)
    stored: list[Answer] = []
    statuses: dict[str, str] = {}
    rng = random.Random(43)
    user = EditorUser(
        client,
        rng,
        stored,
        {},
        on_status=lambda sid, status: statuses.__setitem__(sid, status),
        # Half the answers come after the 0.5 s hot window (their turns hibernate), half
        # while the turn is parked live.
        answer_delay=lambda: rng.choice((0.0, 2.0)),
    )
    gap: dict[str, Any] = {}

    async def failover() -> None:
        deadline = time.monotonic() + 90
        while len(stored) < TURNS // 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        gap["answers_before_stop"] = len(stored)
        gap["running_at_stop"] = sum(s == "running" for s in statuses.values())
        gap["suspended_at_stop"] = sum(s == "suspended_client_tool" for s in statuses.values())
        gap["hibernated_at_stop"] = await asyncio.to_thread(_hibernated, url)
        stopped = time.monotonic()
        await asyncio.to_thread(primary.stop)
        # A read during the gap: answered 503 store_unavailable, not left hanging.
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as probe:
            while time.monotonic() - stopped < GAP_SECONDS:
                r = await probe.get("/status", params={"sessionId": "failover-000"})
                gap.setdefault("probe_answers", []).append(r.status_code)
                if r.status_code == 503:
                    gap["probe_503_code"] = r.json().get("code")
                    gap["probe_503_retry_after"] = r.headers.get("Retry-After")
                await asyncio.sleep(0.5)
        await asyncio.to_thread(standby.promote)
        promoted = time.monotonic()
        gap["stop_to_promoted_s"] = round(promoted - stopped, 2)
        gap["stopped_at"] = stopped

    try:
        sids = [f"failover-{i:03d}" for i in range(TURNS)]
        drivers = [user.run(sid, editor_message(i), timeout=300) for i, sid in enumerate(sids)]
        await asyncio.gather(failover(), *drivers)
    finally:
        await client.close()
        await asyncio.to_thread(server.stop)
    promoted_url = standby.url(url.rpartition("/")[2].split("?")[0])
    found = check_database(promoted_url, sids, stored)
    after = [t - gap["stopped_at"] for t in client.unavailable_at if t >= gap["stopped_at"]]
    log = server.log_path.read_text(errors="replace")
    return {
        **{k: v for k, v in gap.items() if k != "stopped_at"},
        **found.summary(),
        "answers_accepted": sum(
            1 for a in stored if any(x in ("accepted", "already_completed") for x in a.answers)
        ),
        "answers_lost": len(found.lost_answers),
        "duplicate_tool_results": len(found.duplicate_tool_results),
        "not_ended": len(found.not_ended),
        "active_without_workflow": len(found.active_without_workflow),
        "http_503_answers": client.unavailable,
        "seconds_of_503_after_stop": round(max(after), 2) if after else 0.0,
        "http_500_answers": len(client.internal_errors),
        "http_500_examples": client.internal_errors[:2],
        "server_logged_store_unavailable": "server.store_unavailable" in log,
        "continuations_of_hibernated_turns": _continuations(promoted_url),
    }
