"""Benchmark: table sizes under a steady rate of sessions with a short retention.

One runtime on a fresh database runs one-turn sessions of a scripted agent at ``--rate`` a
second for ``--seconds``, with ``HELIX_RETENTION`` = ``--retention`` seconds and the sweeper
every ``--sweep`` seconds. Every ``--every`` seconds it records, for each of our tables and
DBOS's, its rows and its bytes (``pg_total_relation_size``: heap, indexes and TOAST), and how
many times autovacuum has vacuumed it: with a retention, the rows stop growing once the
retention has passed, and the bytes once autovacuum has made the deleted rows' space reusable.

The database is on a private cluster of the server's defaults (``tests/faults/pgcluster.py``:
autovacuum on, as on any production server), or with ``--shared`` on the local server
(``HELIX_TEST_PG_URL``, an admin URL), whose test configuration may turn autovacuum off: the
output names the setting.

    .venv/bin/python bench/retention_soak.py [--rate 10] [--seconds 300] [--retention 30]
        [--shared] [--tables]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helix_dbos.config import HelixSettings
from helix_dbos.core import define_agent
from helix_dbos.llm.scripted import ScriptedLLM, reply
from helix_dbos.runtime import AgentRuntime
from tests.faults.pgcluster import PrivateCluster

ADMIN = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def table_sizes(url: str) -> dict[str, dict[str, int]]:
    """Each of our tables and DBOS's: its rows, bytes (with indexes and TOAST), dead rows, and
    how many times autovacuum has vacuumed it."""
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT n.nspname, c.relname, pg_total_relation_size(c.oid),"
            " coalesce(t.n_dead_tup, 0), coalesce(t.autovacuum_count, 0)"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " LEFT JOIN pg_stat_user_tables t ON t.relid = c.oid WHERE c.relkind = 'r'"
            " AND (c.relname LIKE '\\_\\_agents\\_%%' OR n.nspname = 'dbos') ORDER BY 1, 2"
        ).fetchall()
        out = {}
        for schema, table, size, dead, vacuums in found:
            rows = conn.execute(f'SELECT count(*) FROM "{schema}"."{table}"').fetchone()
            out[f"{schema}.{table}"] = {
                "rows": int(rows[0]) if rows else 0,
                "bytes": int(size),
                "dead": int(dead),
                "autovacuums": int(vacuums),
            }
    return out


def sizes(url: str, per_table: bool = False) -> dict[str, Any]:
    """One sample: the sessions and DBOS workflows, and the rows and KiB of our tables and of
    DBOS's (each table's too with ``per_table``)."""
    tables = table_sizes(url)
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM __agents_states"
            " WHERE status NOT IN ('completed', 'failed', 'interrupted')"
        ).fetchone()
    ours = {k: v for k, v in tables.items() if not k.startswith("dbos.")}
    dbos = {k: v for k, v in tables.items() if k.startswith("dbos.")}
    sample: dict[str, Any] = {
        "sessions": tables["public.__agents_states"]["rows"],
        "not_ended": int(row[0]) if row else 0,
        "dbos_workflows": tables["dbos.workflow_status"]["rows"],
        "agents_rows": sum(v["rows"] for v in ours.values()),
        "agents_tables_kib": sum(v["bytes"] for v in ours.values()) // 1024,
        "dbos_rows": sum(v["rows"] for v in dbos.values()),
        "dbos_tables_kib": sum(v["bytes"] for v in dbos.values()) // 1024,
        "autovacuums": sum(v["autovacuums"] for v in tables.values()),
    }
    if per_table:
        sample["tables"] = {
            k: [v["rows"], v["bytes"] // 1024] for k, v in tables.items() if v["bytes"] > 8192 * 3
        }
    return sample


async def soak(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    agent = define_agent("chat", llm=ScriptedLLM(lambda request: reply("ok")))
    settings = HelixSettings(
        database_url=url,
        executor_id="soak",
        application_version="bench",
        retention_seconds=args.retention,
        retention_sweep_seconds=args.sweep,
    )
    rt = AgentRuntime([agent], settings)
    await rt.launch()
    samples: list[dict[str, Any]] = []
    started = time.monotonic()
    turns: set[asyncio.Task[Any]] = set()

    async def one() -> None:
        await (await rt.start("chat", "hello")).result()

    try:
        next_sample = 0.0
        made = 0
        while (elapsed := time.monotonic() - started) < args.seconds:
            while made < elapsed * args.rate:
                task = asyncio.create_task(one())
                turns.add(task)
                task.add_done_callback(turns.discard)
                made += 1
            if elapsed >= next_sample:
                sample = {"t_s": round(elapsed), "started": made, **sizes(url, args.tables)}
                samples.append(sample)
                print(json.dumps(sample), file=sys.stderr, flush=True)
                next_sample += args.every
            await asyncio.sleep(0.05)
        await asyncio.gather(*turns, return_exceptions=True)
        final = sizes(url, args.tables)
        samples.append({"t_s": round(time.monotonic() - started), "started": made, **final})
    finally:
        await rt.shutdown()
    return samples


@contextlib.contextmanager
def _server(shared: bool) -> Iterator[str]:
    """The admin URL of the server to soak on: the local one, or a private cluster."""
    if shared:
        yield ADMIN
        return
    with PrivateCluster.create() as cluster:
        yield cluster.admin_url


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rate", type=float, default=10.0, help="sessions a second")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--retention", type=float, default=30.0, help="seconds")
    parser.add_argument("--sweep", type=float, default=5.0, help="seconds between sweeps")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--shared", action="store_true", help="the local server, not a private one")
    parser.add_argument("--tables", action="store_true", help="each table's rows and KiB too")
    args = parser.parse_args()
    with _server(args.shared) as admin:
        name = f"helix_bench_soak_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
            row = conn.execute("SHOW autovacuum").fetchone()
        url = f"{admin.rpartition('/')[0]}/{name}"
        try:
            samples = asyncio.run(soak(url, args))
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    out = {"args": vars(args), "autovacuum": row[0] if row else None, "samples": samples}
    print(json.dumps(out, indent=1))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
