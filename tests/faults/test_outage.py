"""A database outage under load: Postgres is stopped twice for 5 s while 80 turns are mid
model step, behind ``helix-dbos serve``. Afterwards no turn has failed because of it, every
accepted answer is applied, and no request was answered 500 (only 503 ``store_unavailable``).

The database is a private cluster the test stops (immediate: every connection drops at once)
and starts; the shared server is never touched.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import pytest

from .pgcluster import PrivateCluster
from .serve import Answer, Client, EditorUser, ServeProcess, check_database, editor_message

pytestmark = [pytest.mark.slow, pytest.mark.postgres_only]

#: Turns in flight during the outages.
TURNS = 80
#: How long each outage lasts.
OUTAGE_SECONDS = 5.0
#: Each model call takes this long, so the outages land mid call.
MODEL_DELAY_MS = 1500


@pytest.mark.timeout(400)
async def test_two_outages_mid_step_fail_no_turn(
    cluster: PrivateCluster, cluster_url: str, tmp_path: Path
) -> None:
    """80 turns; the database stops for 5 s while their first model calls run, and again
    while the continuations after their answers run. Every turn completes."""
    server = ServeProcess(
        cluster_url, tmp_path, env={"HELIX_DEMO_MODEL_DELAY_MS": str(MODEL_DELAY_MS)}
    )
    server.start()
    client = Client(server.base_url, patience=240)
    stored: list[Answer] = []
    statuses: dict[str, str] = {}
    user = EditorUser(
        client,
        random.Random(),
        stored,
        {},
        on_status=lambda sid, status: statuses.__setitem__(sid, status),
    )

    async def outage(label: str) -> dict[str, int]:
        running = sum(1 for status in statuses.values() if status == "running")
        await asyncio.to_thread(cluster.stop)
        await asyncio.sleep(OUTAGE_SECONDS)
        await asyncio.to_thread(cluster.start)
        return {"outage": int(label), "turns_running_at_stop": running}

    async def wait_for(predicate: object, timeout: float) -> None:
        assert callable(predicate)
        deadline = time.monotonic() + timeout
        while not predicate() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def orchestrate() -> list[dict[str, int]]:
        outages = []
        # 1: the first model calls (every session is running right after its start).
        await wait_for(lambda: sum(s == "running" for s in statuses.values()) >= TURNS * 3 // 4, 60)
        outages.append(await outage("1"))
        # 2: the continuations: once most edits are answered, their model calls run (if the
        # first outage failed the turns, there are none: stop anyway, and say so).
        await wait_for(
            lambda: (
                len(stored) >= TURNS // 2
                or all(s in ("completed", "failed", "interrupted") for s in statuses.values())
            ),
            90,
        )
        await asyncio.sleep(0.3)
        outages.append(await outage("2"))
        return outages

    try:
        sids = [f"outage-{i:03d}" for i in range(TURNS)]
        drivers = [user.run(sid, editor_message(i), timeout=240) for i, sid in enumerate(sids)]
        outages, *_ = await asyncio.gather(orchestrate(), *drivers)
    finally:
        await client.close()
        await asyncio.to_thread(server.stop)
    found = check_database(cluster_url, sids, stored)
    figures = {
        "outages": outages,
        **found.summary(),
        "answers_stored": len(stored),
        "start_answers": {
            str(k): list(user.starts.values()).count(k) for k in set(user.starts.values())
        },
        "missing_after_start": [sid for sid, status in statuses.items() if status == "missing"],
        "http_503_answers": client.unavailable,
        "http_500_answers": len(client.internal_errors),
        "http_500_examples": client.internal_errors[:2],
    }
    text = json.dumps(figures, indent=1, default=str)
    print(text)
    assert found.statuses.get("failed", 0) == 0, text
    assert not figures["missing_after_start"], text
    assert not found.driver_text_in_errors, text
    assert not found.not_ended, text
    assert not found.lost_answers, text
    assert not found.duplicate_tool_results, text
    assert not found.active_without_workflow, text
    assert not client.internal_errors, text
    assert found.statuses == {"completed": TURNS}, text
