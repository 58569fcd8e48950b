"""Benchmark: table sizes under a steady rate of sessions with a short retention.

One runtime on a fresh database of the local Postgres (``HELIX_TEST_PG_URL``, an admin URL;
created and dropped) runs one-turn sessions of a scripted agent at ``--rate`` a second for
``--seconds``, with ``HELIX_RETENTION`` = ``--retention`` seconds and the sweeper every
``--sweep`` seconds. Every ``--every`` seconds it records the sessions and DBOS workflow rows
in the database and the bytes of our tables and of DBOS's (``pg_total_relation_size``): with a
retention, the rows stop growing once the retention has passed, and the bytes once autovacuum
has made the deleted rows' space reusable.

    .venv/bin/python bench/retention_soak.py [--rate 10] [--seconds 300] [--retention 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helix_dbos.config import HelixSettings
from helix_dbos.core import define_agent
from helix_dbos.llm.scripted import ScriptedLLM, reply
from helix_dbos.runtime import AgentRuntime

ADMIN = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def sizes(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT n.nspname = 'dbos', sum(pg_total_relation_size(c.oid)) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r'"
            " AND (c.relname LIKE '\\_\\_agents\\_%%' OR n.nspname = 'dbos') GROUP BY 1"
        ).fetchall()
        sessions = conn.execute("SELECT count(*) FROM __agents_states").fetchone()
        workflows = conn.execute("SELECT count(*) FROM dbos.workflow_status").fetchone()
    by = {bool(k): int(v) for k, v in rows}
    return {
        "sessions": int(sessions[0]) if sessions else 0,
        "dbos_workflows": int(workflows[0]) if workflows else 0,
        "agents_tables_kib": by.get(False, 0) // 1024,
        "dbos_tables_kib": by.get(True, 0) // 1024,
    }


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
                sample = {"t_s": round(elapsed), "started": made, **sizes(url)}
                samples.append(sample)
                print(json.dumps(sample), file=sys.stderr, flush=True)
                next_sample += args.every
            await asyncio.sleep(0.05)
        await asyncio.gather(*turns, return_exceptions=True)
        samples.append({"t_s": round(time.monotonic() - started), "started": made, **sizes(url)})
    finally:
        await rt.shutdown()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rate", type=float, default=10.0, help="sessions a second")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--retention", type=float, default=30.0, help="seconds")
    parser.add_argument("--sweep", type=float, default=5.0, help="seconds between sweeps")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    args = parser.parse_args()
    name = f"helix_bench_soak_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{ADMIN.rpartition('/')[0]}/{name}"
    try:
        samples = asyncio.run(soak(url, args))
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(json.dumps({"args": vars(args), "samples": samples}, indent=1))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
