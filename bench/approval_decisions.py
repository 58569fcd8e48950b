"""Benchmark: ``GET /approvals/decisions`` over HTTP with 100,000 decisions on record.

    .venv/bin/python bench/approval_decisions.py [--decisions 100000] [--requests 300] [--keep]

On a fresh database of the local Postgres server (``HELIX_TEST_PG_URL``, an admin URL; created
and dropped), the record is filled with rows as the submit path writes them (one per answer:
10 tenants, 1,000 session owners, 200 deciders, 5 tools; a third of them partial approvals of a
quorum, a tenth denials, a twentieth expiries; spread over 90 days), by batched inserts. A
``helix-dbos serve`` process then answers, one request at a time over a kept-alive connection:
the newest page (50), one tenant's page, one decider's page, this month's denials, one
approval's decisions, and a page deep in the list (its cursor). Reported: p50 / p95 (ms) of
each. The goal is a p50 under 20 ms.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from approvals_inbox import SHARED_ADMIN, TOOLS, serve_inbox

from helix_dbos.config import parse_database_url
from helix_dbos.store.schema import approval_decisions

DAY_MS = 86_400_000
BATCH = 5_000


def _row(i: int, now: int, rng: random.Random) -> dict[str, Any]:
    tenant = f"tenant{i % 10}"
    run, call = f"run_{i // 3:08d}", f"call_{i:08d}"
    kind = rng.random()
    outcome = "denied" if kind < 0.1 else "expired" if kind < 0.15 else "approved"
    partial = outcome == "approved" and kind < 0.48
    return {
        "decision_key": f"answer:{run}::{call}:1",
        "approval_id": f"{run}::{call}",
        "session_id": f"ses_{i // 3:08d}",
        "root_session_id": f"ses_{i // 3:08d}",
        "run_id": run,
        "tool_call_id": call,
        "tool_name": TOOLS[i % len(TOOLS)],
        "args_digest": uuid.UUID(int=rng.getrandbits(128)).hex * 2,
        "edited_digest": None,
        "outcome": outcome,
        "final": not partial,
        "votes": 1 if partial else 2,
        "quorum": 2,
        "reason": "too much" if outcome == "denied" else None,
        "on_timeout": "deny" if outcome == "expired" else None,
        "principal": None if outcome == "expired" else f"approver{i % 200}@{tenant}",
        "tenant": None if outcome == "expired" else tenant,
        "credential": "deadline" if outcome == "expired" else "approver_token",
        "roles": None,
        "owner_principal": f"user{i % 1000}@{tenant}",
        "owner_tenant": tenant,
        "decided_at": now - rng.randrange(90 * DAY_MS),
    }


def build_record(url: str, decisions: int) -> float:
    """Insert ``decisions`` rows; the seconds it took."""
    engine = sa.create_engine(parse_database_url(url).sync)
    rng = random.Random(44)
    now = int(time.time() * 1000)
    started = time.perf_counter()
    with engine.begin() as conn:
        for first in range(0, decisions, BATCH):
            rows = [_row(i, now, rng) for i in range(first, min(decisions, first + BATCH))]
            conn.execute(approval_decisions.insert(), rows)
        conn.execute(sa.text("ANALYZE __agents_approval_decisions"))
    engine.dispose()
    return time.perf_counter() - started


def _timed(client: httpx.Client, params: dict[str, Any], requests: int) -> dict[str, float]:
    for _ in range(20):
        client.get("/approvals/decisions", params=params).raise_for_status()
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get("/approvals/decisions", params=params)
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
        "rows": len(response.json()["decisions"]),
    }


def _deep_cursor(client: httpx.Client, pages: int) -> str:
    cursor = None
    for _ in range(pages):
        params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        cursor = client.get("/approvals/decisions", params=params).json()["nextCursor"]
    assert cursor is not None
    return str(cursor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()

    from helix_dbos.store.migrate import upgrade

    name = f"helix_bench_decisions_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(SHARED_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{SHARED_ADMIN.rpartition('/')[0]}/{name}"
    proc = None
    try:
        upgrade(url)
        seconds = build_record(url, args.decisions)
        print(f"recorded {args.decisions} decisions in {seconds:.1f} s", flush=True)
        month = int(time.time() * 1000) - 30 * DAY_MS
        with tempfile.TemporaryDirectory() as tmp:
            proc, base = serve_inbox(url, Path(tmp), executor_id="bench-decisions")
            with httpx.Client(base_url=base, timeout=10) as client:
                pages = {
                    "the newest page (50)": {},
                    "one tenant's page": {"tenant": "tenant3"},
                    "one decider's page": {"decidedBy": "approver7@tenant7"},
                    "this month's denials": {"outcome": "denied", "since": month},
                    "one approval's decisions": {"approvalId": "run_00012345::call_00037036"},
                    "a page halfway down (cursor)": {
                        "cursor": _deep_cursor(client, max(1, args.decisions // 1000))
                    },
                }
                results = {k: _timed(client, p, args.requests) for k, p in pages.items()}
            proc.terminate()
            proc.wait(30)
            proc = None
        out = {
            "decisions": args.decisions,
            "build_seconds": round(seconds, 1),
            "requests_each": args.requests,
            "results": results,
        }
        print(json.dumps(out, indent=2))
    finally:
        if proc is not None:
            proc.kill()
        if not args.keep:
            with psycopg.connect(SHARED_ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        else:
            print(f"kept {url}")


if __name__ == "__main__":
    main()
