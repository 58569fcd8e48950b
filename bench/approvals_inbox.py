"""Benchmark: ``GET /approvals`` over HTTP with 100,000 pending approvals across 10,000 sessions.

    .venv/bin/python bench/approvals_inbox.py [--sessions 10000] [--per-session 10]
        [--requests 300] [--keep]

On a fresh database of the local Postgres server (``HELIX_TEST_PG_URL``, an admin URL; created
and dropped), ``build_inbox`` parks the approvals as the runtime parks them: each session row
is created ``running``, then one compare-and-swap per session writes its pending map (the
calls as ``PendingCall.dump()`` writes them, digest included), its ownership map and the status
``suspended_client_tool``, so the inbox's triggers fill ``__agents_approvals`` exactly as they
do for real parks. A ``helix-dbos serve`` process then answers, one request at a time over a
kept-alive connection: the first page (50, oldest first), a filtered page (one tenant and one
tool), one principal's page, and a page deep in the list (its cursor). Reported: p50 / p95
(ms) of each, and the build's own figures. The goal is a p50 under 20 ms.

With ``--url``, the benchmark runs on a database already loaded instead (for a million
approvals: ``bulk_park.py --agent pay,ops,admin --tenants 10``, whose sessions each wait on one
approval): the filters are then one of its tenants, one of its tools, both, and one of its
principals, and the plan of each page's statement (``EXPLAIN (ANALYZE, BUFFERS)``) is printed.

``build_inbox`` is also the data of the ``/metrics`` scrape's benchmark: import it from here.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helix_dbos.config import parse_database_url
from helix_dbos.core.session import PendingCall, args_digest

__all__ = ["InboxData", "build_inbox"]

SHARED_ADMIN = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
TOOLS = ("transfer", "refund", "publish", "delete_account", "grant_access")
#: Rows per statement batch while building (one transaction each).
BATCH = 1_000


@dataclass(frozen=True)
class InboxData:
    """What ``build_inbox`` wrote."""

    sessions: int
    approvals: int
    tenants: list[str]
    principals: int
    tools: tuple[str, ...]
    seconds: float
    """How long the build took (the park writes, the triggers included)."""


def _calls(session: int, run_id: str, per_session: int, registered: int) -> dict[str, Any]:
    calls = {}
    for j in range(per_session):
        tool = TOOLS[(session + j) % len(TOOLS)]
        args = {"amount": (session * 7 + j) % 1000, "to": f"account-{session}-{j}"}
        tcid = f"call_{uuid.uuid4().hex[:16]}"
        calls[tcid] = PendingCall(
            tool_call_id=tcid,
            tool_name=tool,
            input=args,
            run_id=run_id,
            kind="approval",
            index=j,
            deadline_at=registered + 24 * 3_600_000,
            registered_at=registered + j,
            completed_retention_ms=86_400_000,
            approval_id=f"{run_id}::{tcid}",
            args_digest=args_digest(tool, args),
        ).dump()
    return calls


def build_inbox(
    database_url: str,
    *,
    sessions: int = 10_000,
    per_session: int = 10,
    tenants: int = 10,
    principals_per_tenant: int = 100,
    spread_hours: float = 12.0,
    seed: int = 29,
) -> InboxData:
    """Park ``sessions`` x ``per_session`` approvals in a migrated database.

    Sessions belong to ``tenants`` tenants (``tenant0``...) and, within each, to
    ``principals_per_tenant`` principals (``user<n>@tenant<t>``); they parked over the last
    ``spread_hours`` hours in random order; each parks one batch of ``per_session`` approvals
    of the tools in ``TOOLS``, due 24 hours after it parked.
    """
    rng = random.Random(seed)
    now = int(time.time() * 1000)
    engine = sa.create_engine(parse_database_url(database_url).sync, poolclass=sa.pool.NullPool)
    postgres = engine.dialect.name == "postgresql"
    as_json = "CAST(:{} AS jsonb)" if postgres else ":{}"
    create = sa.text(
        "INSERT INTO __agents_states (session_id, agent_type, root_session_id, status, run_id,"
        " workflow_id, version, event_seq, metadata, created_at, updated_at,"
        " pending_client_tool_calls, client_tool_call_ownership, principal, tenant)"
        " VALUES (:sid, 'banker', :sid, 'running', :run, :wf, 0, 0, '{}', :at, :at, '{}', '{}',"
        " :principal, :tenant)"
    )
    park = sa.text(
        "UPDATE __agents_states SET status = 'suspended_client_tool', version = version + 1,"
        f" pending_client_tool_calls = {as_json.format('pending')},"
        f" client_tool_call_ownership = {as_json.format('ownership')}, updated_at = :at"
        " WHERE session_id = :sid AND version = 0"
    )
    started = time.perf_counter()
    rows = []
    for i in range(sessions):
        sid = f"ses_{uuid.UUID(int=rng.getrandbits(128)).hex}"
        run = f"run_{uuid.UUID(int=rng.getrandbits(128)).hex[:24]}"
        tenant = rng.randrange(tenants)
        parked = now - int(rng.random() * spread_hours * 3_600_000)
        pending = _calls(i, run, per_session, parked)
        rows.append(
            {
                "sid": sid,
                "run": run,
                "wf": f"helix:{sid}:{run}",
                "principal": f"user{rng.randrange(principals_per_tenant)}@tenant{tenant}",
                "tenant": f"tenant{tenant}",
                "at": datetime.fromtimestamp(parked / 1000, UTC),
                "pending": json.dumps(pending),
                "ownership": json.dumps({tcid: sid for tcid in pending}),
            }
        )
    try:
        for start in range(0, len(rows), BATCH):
            chunk = rows[start : start + BATCH]
            with engine.begin() as conn:
                conn.execute(create, chunk)
                conn.execute(park, chunk)
        with engine.begin() as conn:
            conn.execute(sa.text("ANALYZE __agents_approvals" if postgres else "ANALYZE"))
            approvals = conn.execute(sa.text("SELECT count(*) FROM __agents_approvals")).scalar()
    finally:
        engine.dispose()
    return InboxData(
        sessions=sessions,
        approvals=int(approvals or 0),
        tenants=[f"tenant{t}" for t in range(tenants)],
        principals=tenants * principals_per_tenant,
        tools=TOOLS,
        seconds=time.perf_counter() - started,
    )


# -- the benchmark ----------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve_inbox(
    url: str, logs: Path, executor_id: str = "bench-inbox"
) -> tuple[subprocess.Popen[bytes], str]:
    """``helix-dbos serve`` on ``url`` (unauthenticated, its log in ``logs``), once it answers;
    returns the process and its base URL. Its reconciler is off (see below)."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "helix_dbos.cli", "serve", "--allow-unauthenticated"]
        + ["--port", str(port)],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("HELIX_")},
            "HELIX_DATABASE_URL": url,
            "HELIX_EXECUTOR_ID": executor_id,
            # The built sessions have no workflow behind them: the reconciler would end them
            # mid-run and the pages would shrink under the measurement.
            "HELIX_HEAL_INTERVAL_SECONDS": "0",
        },
        stdout=(logs / "serve.log").open("wb"),
        stderr=subprocess.STDOUT,
        cwd=logs,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180  # a busy machine starts it slowly
    while True:
        if proc.poll() is not None:
            raise RuntimeError((logs / "serve.log").read_text()[-2000:])
        try:
            httpx.get(f"{base}/openapi.json", timeout=1).raise_for_status()
            return proc, base
        except httpx.TransportError:
            if time.monotonic() > deadline:
                proc.kill()  # never leave a server behind
                raise
            time.sleep(0.1)


def _cpu_ms(pid: int) -> float:
    """CPU time (user + system, ms) a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _timed(
    client: httpx.Client, params: dict[str, Any], requests: int, pid: int | None = None
) -> dict[str, float]:
    """p50 / p95 (ms) of ``GET /approvals`` with ``params``, after a warm-up (and, given the
    serving process, its CPU time per request: unlike the wall time, the machine's other
    work does not add to it)."""
    for _ in range(20):
        client.get("/approvals", params=params).raise_for_status()
    cpu = _cpu_ms(pid) if pid else 0.0
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get("/approvals", params=params)
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    times.sort()
    out = {
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
        "rows": len(response.json()["approvals"]),
    }
    if pid:
        out["server_cpu_ms_per_request"] = round((_cpu_ms(pid) - cpu) / requests, 2)
    return out


def _deep_cursor(client: httpx.Client, pages: int) -> str:
    """The cursor ``pages`` pages of 500 into the list."""
    cursor = None
    for _ in range(pages):
        params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        cursor = client.get("/approvals", params=params).json()["nextCursor"]
    assert cursor is not None
    return str(cursor)


def loaded_filters(url: str) -> dict[str, dict[str, Any]]:
    """The filtered pages to time on a loaded database: one of its tenants, tools and
    principals (the most common of each), alone and tenant with tool."""
    with psycopg.connect(url) as conn:

        def most(column: str) -> str:
            row = conn.execute(
                f"SELECT {column} FROM __agents_approvals WHERE {column} IS NOT NULL"
                f" GROUP BY 1 ORDER BY count(*) DESC LIMIT 1"
            ).fetchone()
            assert row is not None, f"no approval has a {column}"
            return str(row[0])

        tenant, tool, principal = most("tenant"), most("tool_name"), most("principal")
    return {
        f"filtered page (tenant {tenant})": {"tenant": tenant},
        f"filtered page (tool {tool})": {"tool": tool},
        "filtered page (tenant + tool)": {"tenant": tenant, "tool": tool},
        f"one principal's page ({principal})": {"principal": principal},
    }


def explain(url: str, params: dict[str, Any]) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the inbox's statement for ``params`` (the route's
    query parameters), as ``list_approvals`` runs it."""
    from sqlalchemy.dialects import postgresql

    from helix_dbos.store.approvals import ApprovalQuery, inbox_statement

    now = int(time.time() * 1000)
    query = ApprovalQuery(
        tool=params.get("tool"),
        tenant=params.get("tenant"),
        principal=params.get("principal"),
        limit=int(params.get("limit", 50)),
        cursor=params.get("cursor"),
    )
    statement = inbox_statement(query, now)
    sql = str(
        statement.limit(query.limit + 1).compile(
            dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}
        )
    )
    with psycopg.connect(url) as conn:
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql).fetchall()  # type: ignore[arg-type]
    return "\n".join(str(r[0]) for r in rows)


def measure_loaded(url: str, requests: int, pages_deep: int) -> dict[str, Any]:
    """Time the pages against ``helix-dbos serve`` on a loaded database (see the docstring)."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM __agents_approvals").fetchone()
    pages: dict[str, dict[str, Any]] = {"first page (50, oldest first)": {}}
    pages.update(loaded_filters(url))
    with tempfile.TemporaryDirectory() as tmp:
        proc, base = serve_inbox(url, Path(tmp))
        try:
            with httpx.Client(base_url=base, timeout=30) as client:
                pages["a page halfway down (cursor)"] = {"cursor": _deep_cursor(client, pages_deep)}
                results = {
                    name: _timed(client, params, requests, proc.pid)
                    for name, params in pages.items()
                }
        finally:
            proc.terminate()
            proc.wait(30)
    plans = {name: explain(url, params) for name, params in pages.items()}
    return {
        "approvals": int(row[0]) if row else 0,
        "requests_each": requests,
        "results": results,
        "plans": plans,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a loaded database to measure (nothing is built)")
    parser.add_argument("--deep", type=int, default=1000, help="--url: pages of 500 deep")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()
    if args.url:
        out = measure_loaded(args.url, args.requests, args.deep)
        for name, plan in out.pop("plans").items():
            print(f"-- {name}\n{plan}\n")
        print(json.dumps(out, indent=2))
        return

    from helix_dbos.store.migrate import upgrade

    name = f"helix_bench_inbox_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(SHARED_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{SHARED_ADMIN.rpartition('/')[0]}/{name}"
    proc = None
    try:
        upgrade(url)
        data = build_inbox(url, sessions=args.sessions, per_session=args.per_session)
        print(
            f"built {data.approvals} approvals across {data.sessions} sessions in "
            f"{data.seconds:.1f} s",
            flush=True,
        )
        with tempfile.TemporaryDirectory() as tmp:
            proc, base = serve_inbox(url, Path(tmp))
            with httpx.Client(base_url=base, timeout=10) as client:
                results = {
                    "first page (50, oldest first)": _timed(client, {}, args.requests),
                    "filtered page (tenant + tool)": _timed(
                        client, {"tenant": "tenant3", "tool": "publish"}, args.requests
                    ),
                    "one principal's page": _timed(
                        client, {"principal": "user7@tenant3"}, args.requests
                    ),
                    "older than 6 h, deadline within 20 h": _timed(
                        client,
                        {
                            "olderThanMs": 6 * 3_600_000,
                            "deadlineBefore": int(time.time() * 1000) + 20 * 3_600_000,
                        },
                        args.requests,
                    ),
                    "a page halfway down (cursor)": _timed(
                        client,
                        {"cursor": _deep_cursor(client, max(1, data.approvals // 1000))},
                        args.requests,
                    ),
                }
            proc.terminate()
            proc.wait(30)
            proc = None
        out = {
            "approvals": data.approvals,
            "sessions": data.sessions,
            "build_seconds": round(data.seconds, 1),
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
