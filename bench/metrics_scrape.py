"""Benchmark: a scrape of ``GET /metrics`` with 100,000 pending approvals across 10,000 sessions.

    .venv/bin/python bench/metrics_scrape.py [--backend postgres|sqlite] [--sessions 10000]
        [--per-session 10] [--requests 200]

The data is the approval inbox benchmark's (``approvals_inbox.build_inbox``: approvals parked
as the runtime parks them, the inbox table filled by its triggers), on a fresh Postgres
database of the local server (``HELIX_TEST_PG_URL``, an admin URL; created and dropped) or a
fresh SQLite file. A ``helix-dbos serve --allow-unauthenticated`` process answers the scrapes,
one at a time over a kept-alive connection. Reported: p50 / p95 (ms) of the scrape over HTTP,
and of its one statement alone (``store.pending_figures``) in this process, and the gauges the
scrape answered (they must add up to the data). The statement is timed twice on Postgres: as
the build left the tables, and after a ``VACUUM`` (which autovacuum runs on its own after bulk
inserts): the approvals' count is an index-only scan, which reads the table's rows too for the
pages not yet marked all-visible.

With ``--url``, the scrapes run on a database already loaded instead (a million approvals:
``bulk_park.py --agent pay,ops,admin --tenants 10``); the gauges are checked against a count of
the inbox's rows before their deadline, and the statement's plan is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from approvals_inbox import SHARED_ADMIN, build_inbox, serve_inbox

from helix_dbos.store.dialect import Postgres
from helix_dbos.store.migrate import upgrade
from helix_dbos.store.pending_figures import CLOCK_SLACK_MS, figures_sql, pending_figures
from helix_dbos.store.store import SessionStore

#: The client window of the served demo agents (``editContent``: the default 5 minutes).
CLIENT_WINDOW_MS = 300_000


def _percentiles(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
    }


def _scrapes(client: httpx.Client, requests: int) -> tuple[dict[str, float], str]:
    """p50 / p95 of ``GET /metrics`` after a warm-up; the last answer's text."""
    for _ in range(10):
        client.get("/metrics").raise_for_status()
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get("/metrics")
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    return _percentiles(times), response.text


async def _statement(url: str, requests: int) -> dict[str, float]:
    """p50 / p95 of the scrape's one statement, on this process's own store."""
    store = SessionStore.from_url(url)
    try:
        for _ in range(10):
            await pending_figures(store, CLIENT_WINDOW_MS)
        times = []
        for _ in range(requests):
            started = time.perf_counter()
            await pending_figures(store, CLIENT_WINDOW_MS)
            times.append((time.perf_counter() - started) * 1000)
    finally:
        await store.close()
    return _percentiles(times)


def _gauges(text: str) -> dict[str, Any]:
    """The pending gauges of a scrape: approvals by tool, their sum, the oldest's age."""
    out: dict[str, Any] = {"pending_approvals": {}, "pending_client_calls": {}}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "helix_pending_approvals":
                out["pending_approvals"][sample.labels["tool"]] = int(sample.value)
            elif sample.name == "helix_pending_client_calls":
                out["pending_client_calls"][sample.labels["tool"]] = int(sample.value)
            elif sample.name == "helix_oldest_pending_approval_age_seconds":
                out["oldest_age_hours"] = round(sample.value / 3600, 2)
    out["pending_approvals_total"] = sum(out["pending_approvals"].values())
    return out


def measure_loaded(url: str, requests: int) -> dict[str, Any]:
    """The scrape and its statement on a loaded database; the gauges checked exactly."""
    statement = asyncio.run(_statement(url, requests))
    with tempfile.TemporaryDirectory() as tmp:
        proc, base = serve_inbox(url, Path(tmp), "bench-metrics")
        try:
            with httpx.Client(base_url=base, timeout=30) as client:
                scrape, text = _scrapes(client, requests)
        finally:
            proc.terminate()
            proc.wait(30)
    gauges = _gauges(text)
    now = int(time.time() * 1000)
    with psycopg.connect(url) as conn:
        exact = dict(
            conn.execute(  # type: ignore[arg-type]
                "SELECT tool_name, count(*) FROM __agents_approvals WHERE deadline_at > %s"
                " GROUP BY 1",
                (now,),
            ).fetchall()
        )
        since = datetime.fromtimestamp((now - CLIENT_WINDOW_MS - CLOCK_SLACK_MS) / 1000, UTC)
        sql = re.sub(r":(now|since)\b", r"%(\1)s", figures_sql(Postgres))
        with conn.transaction():
            for setting in Postgres.figures_plan:
                conn.execute(setting)  # type: ignore[arg-type]
            plan = conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS) " + sql,  # type: ignore[arg-type]
                {"now": now, "since": since},
            ).fetchall()
    # The served app's own tools are shown too, at 0.
    shown = {tool: n for tool, n in gauges["pending_approvals"].items() if n}
    assert shown == exact, (gauges, exact)
    return {
        "approvals": sum(exact.values()),
        "requests": requests,
        "scrape over HTTP": scrape,
        "its statement alone": statement,
        "gauges": gauges,
        "plan": "\n".join(str(r[0]) for r in plan),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a loaded database to measure (nothing is built)")
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    if args.url:
        out = measure_loaded(args.url, args.requests)
        print(out.pop("plan"))
        print(json.dumps(out, indent=2))
        return

    name = f"helix_bench_metrics_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        if args.backend == "postgres":
            with psycopg.connect(SHARED_ADMIN, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            url = f"{SHARED_ADMIN.rpartition('/')[0]}/{name}"
        else:
            url = f"sqlite:///{Path(tmp) / 'bench.sqlite'}"
        proc = None
        try:
            upgrade(url)
            data = build_inbox(url, sessions=args.sessions, per_session=args.per_session)
            print(
                f"built {data.approvals} approvals across {data.sessions} sessions in "
                f"{data.seconds:.1f} s",
                flush=True,
            )
            statement = {"as built": asyncio.run(_statement(url, args.requests))}
            if args.backend == "postgres":
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("VACUUM ANALYZE")
                statement["after VACUUM"] = asyncio.run(_statement(url, args.requests))
            proc, base = serve_inbox(url, Path(tmp), "bench-metrics")
            with httpx.Client(base_url=base, timeout=30) as client:
                scrape, text = _scrapes(client, args.requests)
            proc.terminate()
            proc.wait(30)
            proc = None
            gauges = _gauges(text)
            assert gauges["pending_approvals_total"] == data.approvals, gauges
            print(
                json.dumps(
                    {
                        "backend": args.backend,
                        "approvals": data.approvals,
                        "sessions": data.sessions,
                        "requests": args.requests,
                        "scrape over HTTP": scrape,
                        "its statement alone": statement,
                        "scrape bytes": len(text.encode()),
                        "gauges": gauges,
                    },
                    indent=2,
                )
            )
        finally:
            if proc is not None:
                proc.kill()
            if args.backend == "postgres":
                with psycopg.connect(SHARED_ADMIN, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
