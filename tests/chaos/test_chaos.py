"""The chaos test, CI-sized: 30 demo sessions through ``helix-dbos serve`` on Postgres, with 5
SIGKILLs at random points and restarts with the same identity (see ``chaos.py``; the full run
is ``bench/chaos.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .chaos import run_chaos

pytestmark = [pytest.mark.slow, pytest.mark.postgres_only]


@pytest.mark.timeout(300)
async def test_chaos_loses_nothing_and_leaves_nothing_stuck(
    cluster_url: str, tmp_path: Path
) -> None:
    """After the kills: every session ended, no duplicate tool result, every accepted answer
    applied, no session active without a live workflow, no interrupted turn completed, no
    500."""
    report = await run_chaos(
        cluster_url,
        tmp_path,
        sessions=30,
        kills=5,
        concurrency=8,
        session_timeout=45,
        late_grace=60,
    )
    summary = json.dumps(report.summary(), indent=1, default=str)
    print(summary)
    assert sum(report.kills_by_point.values()) == 5, summary
    assert report.ok, summary
