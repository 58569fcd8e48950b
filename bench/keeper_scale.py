"""Benchmark: the deadline keeper beside many hibernated sessions that are not due.

On a private PostgreSQL cluster it makes and removes (``initdb``, ``pg_ctl``; or ``--url``, a
database of your own), it:

1. parks one session of ``cold`` and one of ``due`` for real and loads ``--sessions`` sessions
   of ``cold`` and ``--deadlines`` of ``due`` made of them (``bulk_park.py``: exactly the rows
   a real park and hibernation write), the ``cold`` ones parked over the last 12 hours (their
   deadlines a day after their park: none falls due in the run), then ``VACUUM (ANALYZE)``;
2. starts two ``helix-dbos serve`` processes (distinct executor ids, each with its keeper);
3. moves the ``due`` sessions' deadlines to spread uniformly over one minute starting
   ``--lead`` s later (``hibernation_served.deadline_phase``, as ``hibernation.py``'s phase 4)
   and reports how many fired, once each, and their lateness;
4. with ``pg_stat_statements`` (the private cluster loads it), the statements that took the
   most database time during the phase, and ``EXPLAIN (ANALYZE, BUFFERS)`` of the keeper's
   claim on the loaded database (in a transaction rolled back).

    .venv/bin/python bench/keeper_scale.py --sessions 1000000 --deadlines 10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bulk_park  # noqa: E402
from hibernation_served import deadline_phase, serve, stop, until_served  # noqa: E402

from helix_dbos.store._sql.postgres import CLAIM_DUE_BATCHES  # noqa: E402
from helix_dbos.store.migrate import upgrade  # noqa: E402
from tests.faults.pgcluster import PrivateCluster  # noqa: E402

CLUSTER_CONF = (
    "shared_buffers = 1GB\n"
    "max_connections = 300\n"
    "shared_preload_libraries = 'pg_stat_statements'\n"
    "pg_stat_statements.track = all\n"
    "max_wal_size = 8GB\n"
    "checkpoint_timeout = 30min\n"
)


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    from helix_dbos.store.migrate import _config, _engine

    engine = _engine(url)
    with engine.connect() as conn:
        command.downgrade(_config(conn), revision)
        conn.commit()
    engine.dispose()


def explain_claim(url: str) -> list[str]:
    """The keeper's claim, planned and run on the loaded database (rolled back)."""
    sql = "EXPLAIN (ANALYZE, BUFFERS) " + CLAIM_DUE_BATCHES.replace("RETURNING", "RETURNING")
    params = {"now": int(time.time() * 1000), "types": ["due", "cold", "hot"], "limit": 200,
              "until": int(time.time() * 1000) + 30_000}  # fmt: skip
    with psycopg.connect(url) as conn:
        rows = conn.execute(sql, params).fetchall()
        conn.rollback()
    return [str(r[0]) for r in rows]


def explain_orphan_lookup(url: str) -> list[str]:
    """The reconciler's lookup of the sessions of a page of PENDING workflows
    (``store/sessions.py:settled_before`` with ``workflow_ids``), for 500 ids."""
    ids = [f"helix:ses_{i:032x}:run_x" for i in range(500)]
    sql = (
        "EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM __agents_states WHERE updated_at < now()"
        " AND status NOT IN ('running', 'suspended_client_tool') AND workflow_id = ANY(%s)"
        " ORDER BY updated_at LIMIT 500"
    )
    with psycopg.connect(url) as conn:
        return [str(r[0]) for r in conn.execute(sql, (ids,)).fetchall()]


def top_statements(url: str, n: int = 12) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 3),"
            " rows, shared_blks_hit + shared_blks_read, left(regexp_replace(query, '\\s+', ' ',"
            " 'g'), 160) FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT %s",
            (n,),
        ).fetchall()
    keys = ("calls", "total_ms", "mean_ms", "rows", "blocks", "query")
    return [
        dict(zip(keys, (float(v) if i in (1, 2) else v for i, v in enumerate(r)), strict=True))
        for r in rows
    ]


def reset_statements(url: str) -> bool:
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT pg_stat_statements_reset()")
        return True
    except psycopg.Error:
        return False


def table_sizes(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT n.nspname || '.' || c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r'"
            " AND (c.relname LIKE '\\_\\_agents\\_%%' OR n.nspname = 'dbos')"
            " ORDER BY 2 DESC"
        ).fetchall()
    return {str(k): int(v) for k, v in rows}


async def run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"cpu_count": os.cpu_count(), "load_average": os.getloadavg()[0]}
    upgrade(url)
    cold, due = await bulk_park.park_one(url, "cold", "due")
    started = time.perf_counter()
    loaded = bulk_park.load(
        url, bulk_park.read_template(url, cold), args.sessions, report=True, batch=5000
    )
    load_s = time.perf_counter() - started
    rounds = 2 if args.ab else 1
    bulk_park.load(
        url, bulk_park.read_template(url, due), rounds * args.deadlines, spread_seconds=60.0
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    report["load"] = {
        "hibernated_not_due": len(loaded) + 1,
        "due": rounds * args.deadlines + 1,
        "seconds": round(load_s, 1),
        "per_s": round(len(loaded) / load_s),
        "database_bytes": sum(table_sizes(url).values()),
    }
    print(json.dumps(report["load"]), file=sys.stderr, flush=True)
    report["claim_plan"] = explain_claim(url)
    report["orphan_lookup_plan"] = explain_orphan_lookup(url)
    if args.ab:
        # The same loaded database, twice: an earlier tree's servers, then this one's.
        report["before"] = await keeper_round(url, args, Path(args.ab))
        upgrade(url)
        report["orphan_lookup_plan_after"] = explain_orphan_lookup(url)
        report["after"] = await keeper_round(url, args, None)
    else:
        code = Path(args.serve_code) if args.serve_code else None
        report.update(await keeper_round(url, args, code))
    return report


async def keeper_round(url: str, args: argparse.Namespace, code: Path | None) -> dict[str, Any]:
    """Two servers of ``code`` (default: this tree) fire ``--deadlines`` deadlines."""
    report: dict[str, Any] = {}
    if code is not None:
        # An earlier tree's servers: the schema goes back to that tree's head revision.
        head = sorted(p.name[:4] for p in (code / "alembic" / "versions").glob("0*.py"))[-1]
        downgrade(url, head)
        report["served_code"] = {"tree": str(code), "revision": head}
        report["orphan_lookup_plan"] = explain_orphan_lookup(url)
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        try:
            for name in ("keeper-a", "keeper-b"):
                procs.append(serve(url, name, logs, code))
                until_served(procs[-1], "ses_none", logs)
            tracked = reset_statements(url)
            report["deadline_keeper"] = await deadline_phase(url, args, [p.pid for p in procs])
            if tracked:
                report["top_statements"] = top_statements(url)
        finally:
            for proc in procs:
                stop(proc)
            if args.logs:
                for f in logs.iterdir():
                    print(f"--- {f.name}\n{f.read_text()[-4000:]}", file=sys.stderr)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000, help="hibernated, not due")
    parser.add_argument("--deadlines", type=int, default=10_000, help="due over one minute")
    parser.add_argument("--lead", type=float, default=20.0, help="s before the first deadline")
    parser.add_argument("--grace", type=float, default=180.0, help="s waited past the last")
    parser.add_argument("--url", help="a database of your own (default: a private cluster)")
    parser.add_argument("--logs", action="store_true", help="print the servers' log tails")
    parser.add_argument("--serve-code", help="serve an earlier tree (git archive of a commit)")
    parser.add_argument(
        "--ab", metavar="TREE", help="fire twice on one load: TREE's servers, then this tree's"
    )
    args = parser.parse_args()
    if args.url:
        report = asyncio.run(run(args.url, args))
    else:
        with PrivateCluster.create(CLUSTER_CONF) as cluster:
            report = asyncio.run(run(cluster.create_database(), args))
    print(json.dumps(report, indent=2, default=str))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
