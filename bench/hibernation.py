"""Benchmark: hibernated turns at scale, on one fresh Postgres database.

1. Park N sessions (``--sessions``, default 100,000) on a client call with a hot window of 0:
   every turn hibernates, its workflow ends. ``--processes`` worker processes (each an
   ``AgentRuntime`` with its own executor id) start them, ``--concurrency`` at a time each.
   Reported per worker: RSS after a warm-up, halfway and once all its turns hibernated (bytes
   per hibernated session), its asyncio tasks, the workflows DBOS holds active in it and the
   turns parked live in it; for the database: the bytes of the ``__agents_*`` tables and of
   DBOS's schema (``pg_total_relation_size``, over an empty migrated database) per session;
   and how long parking them took.
2. A restart: ``helix-dbos serve`` launched on that database (with the executor id of a
   worker that parked them) until it first answers ``GET /status`` of a hibernated session,
   against the same on an empty migrated database (``--restarts`` launches of each, taken in
   turns); the server's RSS once it answers.
3. Submit -> first continuation frame over HTTP: a turn parks on a served process, the client
   submits its answer (``POST /submit-tool-result``), then opens the session's ``/sse`` stream
   from the pre-submit head; the clock stops at the first event of the continued turn (its
   ``tool_end``). A hibernated turn (hot window 0, its workflow ended before the submit) and a
   hot one (hot window "never", its workflow parked live), ``--samples`` each, in turns.
4. Deadline keeper lateness: M sessions (``--deadlines``, default 10,000) hibernated on a call
   whose deadline is an hour away; then one statement moves their deadlines (the pending
   entry's ``deadlineAt`` and the mark's ``dueAt``, as a park with that deadline writes them)
   to spread uniformly over one minute starting ``--lead`` seconds later, so that the spread
   does not depend on how fast they parked. Two ``helix-dbos serve`` processes (distinct
   executor ids, each running the deadline keeper) serve the database. Reported: how many
   fired (``client_tool_timeout`` usage rows and ``tool_end`` events), whether any call got two
   tool results, which process fired them, and the lateness (ms) of the results commit (the
   usage row's timestamp) and of the ``tool_end`` event's commit after each deadline; and the
   CPU time of the two servers and of the database server (its postmaster and backends, when
   it runs on this machine) from the first deadline until every call fired, per fired call.
   For this phase mostly: ``--sessions 1000 --samples 0 --restarts 0`` (phase 1 parks few,
   phases 2 and 3 do not run).

    .venv/bin/python bench/hibernation.py [--sessions 100000] [--deadlines 10000]
        [--samples 200] [--processes 2] [--concurrency 64] [--restarts 3]

It creates and drops its own databases on the local Postgres (HELIX_TEST_PG_URL, an admin URL)
and prints its figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import psycopg
from pydantic import BaseModel

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hibernation_served import (  # noqa: E402
    base_of,
    deadline_phase,
    latency_phase,
    restart_phase,
    rss_bytes,
    serve,
    stop,
    until_served,
)

from helix_dbos.core import define_agent, define_tool  # noqa: E402
from helix_dbos.core.llm import LLMRequest, LLMResponse  # noqa: E402
from helix_dbos.llm.scripted import ScriptedLLM, call, reply  # noqa: E402

ADMIN = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
#: Lines a worker writes for the parent start with this.
PREFIX = "HIBERNATION "


class In(BaseModel):
    text: str


class Out(BaseModel):
    applied: int


def script(request: LLMRequest) -> LLMResponse:
    """A user message calls the client tool ``edit`` once; its result ends the turn."""
    if request.messages[-1].role == "user":
        return call(request, ("edit", {"text": "x"}))
    return reply("done")


def _agent(name: str, hibernate_after: float | str) -> Any:
    return define_agent(
        name,
        # A real adapter keeps no conversation; neither does the benchmark's scripted model.
        llm=ScriptedLLM(script, keep_requests=0),
        tools=[define_tool("edit", "edit", In, Out, execute="client", client_tool_timeout=86_400)],
        hibernate_after=hibernate_after,  # type: ignore[arg-type]
    )


class Grant(BaseModel):
    amount: int


def _approval_agent(name: str, tool: str, calls: int) -> Any:
    """A turn that calls ``tool``, a server tool gated by a human approval (a week to answer),
    ``calls`` times at once, and hibernates at once while they wait; their results end it."""

    def approval_script(request: LLMRequest) -> LLMResponse:
        if request.messages[-1].role == "user":
            return call(request, *[(tool, {"amount": 10 * (n + 1)}) for n in range(calls)])
        return reply("done")

    return define_agent(
        name,
        llm=ScriptedLLM(approval_script, keep_requests=0),
        tools=[
            define_tool(
                tool,
                tool,
                Grant,
                execute=lambda grant: {"ok": True},
                require_approval=True,
                client_tool_timeout=7 * 86_400,
            )
        ],
        hibernate_after=0,
    )


#: ``cold`` and ``due`` hibernate at once, ``hot`` never does; the last three wait on eight
#: approvals each (``bulk_park.py --agent pay,ops,admin`` loads a million approvals).
AGENTS = [
    _agent("cold", 0),
    _agent("hot", "never"),
    _agent("due", 0),
    _approval_agent("pay", "transfer", 8),
    _approval_agent("ops", "publish", 8),
    _approval_agent("admin", "grant_access", 8),
]


# -- worker: parks sessions in-process --------------------------------------------------------


def emit(payload: dict[str, Any]) -> None:
    sys.stdout.write(PREFIX + json.dumps(payload) + "\n")
    sys.stdout.flush()


async def park_many(rt: Any, agent: str, n: int, concurrency: int) -> float:
    """Start ``n`` turns of ``agent``, ``concurrency`` at a time, each until its workflow has
    returned hibernated; the seconds it took. Nothing of a turn is kept."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            handle = await rt.start(agent, "go")
            outcome = await handle.workflow.get_result()
            if outcome.get("outcome") != "hibernated":
                raise RuntimeError(f"not hibernated: {outcome}")

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return time.perf_counter() - started


def in_process(rt: Any) -> dict[str, Any]:
    """What the process holds: its RSS, asyncio tasks, DBOS's active workflows, live parks."""
    from dbos._dbos import _get_dbos_instance

    gc.collect()
    with open("/proc/self/status") as f:
        threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    return {
        "rss": rss_bytes(),
        "asyncio_tasks": len(asyncio.all_tasks()),
        "dbos_active_workflows": len(_get_dbos_instance()._active_workflows_set.activeList()),
        "dbos_workflow_tasks": len(_get_dbos_instance()._workflow_tasks),
        "parked_live": len(rt.ctx.parked),
        "runtime_workflow_tasks": len(rt.ctx.workflows),
        "threads": threads,
    }


async def worker(args: argparse.Namespace) -> None:
    from helix_dbos.config import HelixSettings
    from helix_dbos.runtime import AgentRuntime

    settings = HelixSettings(
        database_url=args.url, executor_id=f"park-{args.index}", application_version="bench"
    )
    rt = AgentRuntime(AGENTS, settings)
    await rt.launch()
    try:
        # A warm-up at the working concurrency: pools, DBOS's threads and first-use
        # allocations grow here, not in the measured parks (these turns are counted in N).
        warm = min(args.count, 4 * args.concurrency)
        await park_many(rt, "cold", warm, args.concurrency)
        emit({"ready": True})
        await asyncio.to_thread(sys.stdin.readline)
        before = in_process(rt)
        half = (args.count - warm) // 2
        seconds = await park_many(rt, "cold", half, args.concurrency)
        middle = in_process(rt)
        seconds += await park_many(rt, "cold", args.count - warm - half, args.concurrency)
        after = in_process(rt)
        emit(
            {
                "parked": {
                    "sessions": args.count,
                    "measured": args.count - warm,
                    "seconds": seconds,
                    "before": before,
                    "halfway": middle,
                    "after": after,
                }
            }
        )
        due = int(json.loads(await asyncio.to_thread(sys.stdin.readline))["due"])
        emit(
            {"due": {"sessions": due, "seconds": await park_many(rt, "due", due, args.concurrency)}}
        )
    finally:
        await rt.shutdown()


# -- parent -----------------------------------------------------------------------------------


def create_database(prefix: str) -> str:
    from helix_dbos.store.migrate import upgrade

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{ADMIN.rpartition('/')[0]}/{name}"
    upgrade(url)
    return url


def drop_database(url: str) -> None:
    for attempt in range(30):  # a shared server may be at its max_connections for a while
        try:
            with psycopg.connect(ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{url.rpartition("/")[2]}" WITH (FORCE)')
            return
        except psycopg.OperationalError:
            if attempt == 29:
                raise
            time.sleep(2.0)


def database_bytes(url: str) -> dict[str, int]:
    """Bytes of the ``__agents_*`` tables and of DBOS's schema (indexes and TOAST included)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT n.nspname, c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r'"
            " AND (c.relname LIKE '\\_\\_agents\\_%%' OR n.nspname = 'dbos')"
        ).fetchall()
    return {f"{schema}.{table}": int(size) for schema, table, size in rows}


async def expect(proc: asyncio.subprocess.Process, key: str, timeout: float) -> Any:
    """The worker's next report carrying ``key``."""
    assert proc.stdout is not None
    stdout = proc.stdout

    async def read() -> Any:
        while True:
            line = (await stdout.readline()).decode()
            if not line:
                raise RuntimeError(f"a worker exited (code {await proc.wait()}) before {key}")
            if line.startswith(PREFIX) and key in (payload := json.loads(line[len(PREFIX) :])):
                return payload[key]

    return await asyncio.wait_for(read(), timeout=timeout)


async def tell(proc: asyncio.subprocess.Process, payload: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(payload) + "\n").encode())
    await proc.stdin.drain()


def shares(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


async def park_phase(url: str, args: argparse.Namespace, empty: dict[str, int]) -> dict[str, Any]:
    """Phase 1 (N hibernated, measured), then the M sessions of phase 4 (not measured)."""
    procs = []
    try:
        for i, count in enumerate(shares(args.sessions, args.processes)):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--worker", "--index", str(i), "--count", str(count),
                "--concurrency", str(args.concurrency), "--url", url,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            procs.append(proc)
            await expect(proc, "ready", 600)
        started = time.perf_counter()
        for proc in procs:
            await tell(proc, {"go": True})
        workers = [await expect(proc, "parked", 24 * 3600) for proc in procs]
        wall = time.perf_counter() - started
        sizes = database_bytes(url)
        for proc, due in zip(procs, shares(args.deadlines, args.processes), strict=True):
            await tell(proc, {"due": due})
        due_parks = [await expect(proc, "due", 24 * 3600) for proc in procs]
        for proc in procs:
            await asyncio.wait_for(proc.wait(), 120)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
    return park_report(args, workers, wall, sizes, empty, due_parks)


def park_report(
    args: argparse.Namespace,
    workers: list[dict[str, Any]],
    wall: float,
    sizes: dict[str, int],
    empty: dict[str, int],
    due_parks: list[dict[str, Any]],
) -> dict[str, Any]:
    per_worker = []
    for w in workers:
        b, m, a = w["before"], w["halfway"], w["after"]
        half = w["measured"] // 2
        per_worker.append(
            {
                "sessions": w["sessions"],
                "rss_before_mib": b["rss"] / 2**20,
                "rss_after_mib": a["rss"] / 2**20,
                "rss_bytes_per_hibernated": (a["rss"] - b["rss"]) / max(w["measured"], 1),
                "rss_bytes_per_hibernated_second_half": (a["rss"] - m["rss"])
                / max(w["measured"] - half, 1),
                "after": {k: v for k, v in a.items() if k != "rss"},
                "before": {k: v for k, v in b.items() if k != "rss"},
                "parks_per_s": w["measured"] / w["seconds"],
            }
        )
    grown = {k: v - empty.get(k, 0) for k, v in sizes.items()}
    agents = sum(v for k, v in grown.items() if k.startswith("public."))
    dbos = sum(v for k, v in grown.items() if k.startswith("dbos."))
    return {
        "sessions": args.sessions,
        "processes": args.processes,
        "concurrency_per_process": args.concurrency,
        "park_seconds_wall": wall,
        "parks_per_s": sum(w["measured"] for w in workers) / wall,
        "workers": per_worker,
        "db_bytes_per_session": (agents + dbos) / args.sessions,
        "db_agents_tables_bytes_per_session": agents / args.sessions,
        "db_dbos_tables_bytes_per_session": dbos / args.sessions,
        "db_bytes_by_table_per_session": {
            k: round(v / args.sessions) for k, v in sorted(grown.items(), key=lambda kv: -kv[1])
        },
        "deadline_sessions_park_seconds": max(d["seconds"] for d in due_parks),
    }


# -- phase 3: submit -> first continuation frame ----------------------------------------------


# -- phase 4: the deadline keeper -------------------------------------------------------------


# -- main -------------------------------------------------------------------------------------


async def parent(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"cpu_count": os.cpu_count(), "load_average": os.getloadavg()[0]}
    url = create_database("helix_bench_hib")
    empty_url = create_database("helix_bench_hib_empty")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            logs = Path(tmp)
            report["park"] = await park_phase(url, args, database_bytes(empty_url))
            print(json.dumps(rounded(report["park"])), file=sys.stderr, flush=True)
            if args.restarts > 0:
                report["restart"] = restart_phase(url, empty_url, args.restarts, logs)
                print(json.dumps(report["restart"]), file=sys.stderr, flush=True)
            for name in ("bench-a", "bench-b"):
                procs.append(serve(url, name, logs))
                until_served(procs[-1], "ses_none", logs)
            if args.samples > 0:
                report["submit_to_frame"] = await latency_phase(
                    base_of(procs[0]), url, args.samples
                )
                print(json.dumps(report["submit_to_frame"]), file=sys.stderr, flush=True)
            if args.deadlines > 0:
                report["deadline_keeper"] = await deadline_phase(url, args, [p.pid for p in procs])
            report["servers_rss_mib_at_end"] = [rss_bytes(p.pid) / 2**20 for p in procs]
            for proc in procs:
                stop(proc)
            if args.keep:
                shutil_copy_logs(logs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        if args.keep:
            print(f"kept {url}", file=sys.stderr)
        else:
            drop_database(url)
        drop_database(empty_url)
    return report


def shutil_copy_logs(logs: Path) -> None:
    import shutil

    kept = Path(tempfile.mkdtemp(prefix="hibernation-logs-"))
    for f in logs.iterdir():
        shutil.copy(f, kept / f.name)
    print(f"logs in {kept}", file=sys.stderr)


def rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000, help="hibernated sessions (N)")
    parser.add_argument("--deadlines", type=int, default=10_000, help="deadline calls (M)")
    parser.add_argument("--samples", type=int, default=200, help="submits of each kind")
    parser.add_argument("--processes", type=int, default=2, help="parking processes")
    parser.add_argument("--concurrency", type=int, default=64, help="starts at once, each")
    parser.add_argument("--restarts", type=int, default=3, help="launches of each database")
    parser.add_argument("--lead", type=float, default=20.0, help="s before the first deadline")
    parser.add_argument("--grace", type=float, default=180.0, help="s waited past the last")
    parser.add_argument("--keep", action="store_true", help="keep the database and logs")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        code = 0
        try:
            asyncio.run(worker(args))
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        os._exit(code)
    report = asyncio.run(parent(args))
    print(json.dumps(rounded(report), indent=2))
    sys.stdout.flush()
    # DBOS's threads of a destroyed runtime retry their dropped database: nothing is left.
    os._exit(0)


if __name__ == "__main__":
    main()
