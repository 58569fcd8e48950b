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
   usage row's timestamp) and of the ``tool_end`` event's commit after each deadline.

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
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
from pydantic import BaseModel

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from helix_dbos.core import define_agent, define_tool  # noqa: E402
from helix_dbos.core.llm import LLMRequest, LLMResponse  # noqa: E402
from helix_dbos.llm.scripted import ScriptedLLM, call, reply  # noqa: E402

ADMIN = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
#: Lines a worker writes for the parent start with this.
PREFIX = "HIBERNATION "
RESULT = {"applied": 1}
#: The served app: ``helix-dbos serve hibernation:AGENTS`` from this directory.
APP = f"{Path(__file__).stem}:AGENTS"


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


#: ``cold`` and ``due`` hibernate at once, ``hot`` never does.
AGENTS = [_agent("cold", 0), _agent("hot", "never"), _agent("due", 0)]


def rss_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 1),
        "p95": round(pct(values, 0.95), 1),
        "p99": round(pct(values, 0.99), 1),
        "max": round(max(values), 1),
        "n": len(values),
    }


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


def serve(url: str, executor: str, logs: Path) -> subprocess.Popen[bytes]:
    """``helix-dbos serve`` of ``AGENTS`` on ``url`` (this directory is its working directory,
    so that its ``APP`` imports this module)."""
    return subprocess.Popen(
        [sys.executable, "-m", "helix_dbos.cli", "serve", APP, "--allow-unauthenticated"]
        + ["--port", str(free_port())],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("HELIX_")},
            "HELIX_DATABASE_URL": url,
            "HELIX_EXECUTOR_ID": executor,
            "PYTHONPATH": str(HERE.parent),
        },
        stdout=(logs / f"{executor}.log").open("ab"),
        stderr=subprocess.STDOUT,
        cwd=HERE,
    )


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def base_of(proc: subprocess.Popen[bytes]) -> str:
    args = [str(a) for a in proc.args]  # type: ignore[union-attr]
    return f"http://127.0.0.1:{args[args.index('--port') + 1]}"


def until_served(proc: subprocess.Popen[bytes], session_id: str, logs: Path) -> float:
    """Seconds from now until ``GET /status`` of ``session_id`` is answered (200 or 404)."""
    started = time.perf_counter()
    base = base_of(proc)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited: see {logs}")
        try:
            r = httpx.get(f"{base}/status", params={"sessionId": session_id}, timeout=5)
            if r.status_code in (200, 404):
                return time.perf_counter() - started
        except httpx.TransportError:
            pass
        if time.perf_counter() - started > 300:
            raise RuntimeError("serve did not answer in 300 s")
        time.sleep(0.02)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def one_session(url: str, agent: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT session_id FROM __agents_states WHERE agent_type = %s LIMIT 1", (agent,)
        ).fetchone()
    assert row is not None
    return str(row[0])


def restart_phase(url: str, empty_url: str, restarts: int, logs: Path) -> dict[str, Any]:
    """Phase 2: launch -> first answered ``/status``, loaded and empty databases in turns."""
    probe = one_session(url, "cold")
    times: dict[str, list[float]] = {"hibernated": [], "empty": []}
    rss: dict[str, list[float]] = {"hibernated": [], "empty": []}
    for _ in range(restarts):
        for label, target, sid in (("empty", empty_url, "ses_none"), ("hibernated", url, probe)):
            started = time.perf_counter()
            proc = serve(target, "park-0", logs)
            try:
                until_served(proc, sid, logs)
                times[label].append(time.perf_counter() - started)
                rss[label].append(rss_bytes(proc.pid) / 2**20)
            finally:
                stop(proc)
    return {
        "launch_to_first_status_s": {k: [round(t, 2) for t in v] for k, v in times.items()},
        "median_s": {k: round(statistics.median(v), 2) for k, v in times.items()},
        "server_rss_mib_when_ready": {k: [round(r, 1) for r in v] for k, v in rss.items()},
    }


# -- phase 3: submit -> first continuation frame ----------------------------------------------


async def park_over_http(client: httpx.AsyncClient, base: str, url: str, agent: str) -> Any:
    """Start a turn of ``agent``; wait until it is parked (a ``cold`` one: hibernated, its
    workflow ended): (session, call, last event sequence)."""
    r = await client.post(f"{base}/start", json={"agentType": agent, "message": "go"})
    sid = r.json()["sessionId"]
    while True:
        view = (await client.get(f"{base}/status", params={"sessionId": sid})).json()
        calls = [p for p in view.get("pendingToolCalls", []) if "submittedAt" not in p]
        parked = view["status"] == "suspended_client_tool" and bool(calls)
        if parked and (agent == "hot" or hibernated_and_ended(url, sid)):
            break
        await asyncio.sleep(0.01)
    events = (await client.get(f"{base}/sse", params={"sessionId": sid})).text
    last = max(int(line[4:]) for line in events.splitlines() if line.startswith("id: "))
    return sid, calls[0]["toolCallId"], last


def hibernated_and_ended(url: str, sid: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT s.metadata ? 'hibernated', w.status FROM __agents_states s"
            " LEFT JOIN dbos.workflow_status w ON w.workflow_uuid = s.workflow_id"
            " WHERE s.session_id = %s",
            (sid,),
        ).fetchone()
    return row is not None and bool(row[0]) and row[1] == "SUCCESS"


async def submit_to_frame(
    client: httpx.AsyncClient, base: str, sid: str, call_id: str, last: int
) -> tuple[float, float, str]:
    """(ms to the submit's answer, ms to the first continuation frame, its type)."""
    sent = time.perf_counter()
    r = await client.post(
        f"{base}/submit-tool-result",
        json={"sessionId": sid, "toolCallId": call_id, "result": RESULT},
    )
    answered = time.perf_counter()
    assert r.status_code == 200 and r.json()["continuation"]["kind"] == "new_run", r.text
    params: dict[str, str | int] = {"sessionId": sid, "fromSequence": last + 1}
    async with client.stream("GET", f"{base}/sse", params=params) as stream:
        event_id = None
        async for line in stream.aiter_lines():
            if line.startswith("id: "):
                event_id = line
            elif line.startswith("data: ") and event_id is not None:
                frame = time.perf_counter()
                kind = json.loads(line[6:])["type"]
                return (answered - sent) * 1000, (frame - sent) * 1000, kind
    raise RuntimeError("the stream ended without a continuation frame")


async def latency_phase(base: str, url: str, samples: int) -> dict[str, Any]:
    """Phase 3: ``samples`` of each kind (after 5 warm-ups each), the kinds in turns."""
    frames: dict[str, list[float]] = {"hibernated": [], "hot": []}
    answers: dict[str, list[float]] = {"hibernated": [], "hot": []}
    types: dict[str, dict[str, int]] = {"hibernated": {}, "hot": {}}
    async with httpx.AsyncClient(timeout=60) as client:
        for i in range(samples + 5):
            for label, agent in (("hibernated", "cold"), ("hot", "hot")):
                sid, call_id, last = await park_over_http(client, base, url, agent)
                answer, frame, kind = await submit_to_frame(client, base, sid, call_id, last)
                if i >= 5:
                    frames[label].append(frame)
                    answers[label].append(answer)
                    types[label][kind] = types[label].get(kind, 0) + 1
    return {
        label: {
            "submit_to_first_frame_ms": spread(frames[label]),
            "submit_answer_ms": spread(answers[label]),
            "first_frame_types": types[label],
        }
        for label in frames
    }


# -- phase 4: the deadline keeper -------------------------------------------------------------


def spread_deadlines(url: str, lead: float, window: float) -> tuple[int, dict[str, int]]:
    """Move the ``due`` sessions' deadlines to ``lead`` s from now, spread uniformly over
    ``window`` s: the pending entry's ``deadlineAt`` and the mark's ``dueAt`` (one statement,
    each row's version moved on as any write does). (start, session -> deadline)."""
    start = int((time.time() + lead) * 1000)
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "WITH d AS (SELECT session_id, (SELECT k FROM jsonb_object_keys("
            "pending_client_tool_calls) k LIMIT 1) AS tcid, %(start)s::bigint + ((row_number()"
            " OVER (ORDER BY md5(session_id)) - 1) * %(window)s::bigint) / count(*) OVER () AS due"
            " FROM __agents_states WHERE agent_type = 'due' AND metadata ? 'hibernated')"
            " UPDATE __agents_states s SET pending_client_tool_calls = jsonb_set("
            "s.pending_client_tool_calls, ARRAY[d.tcid, 'deadlineAt'], to_jsonb(d.due)),"
            " metadata = jsonb_set(s.metadata, '{hibernated,dueAt}', to_jsonb(d.due)),"
            " version = s.version + 1, updated_at = now()"
            " FROM d WHERE s.session_id = d.session_id RETURNING s.session_id, d.due",
            {"start": start, "window": int(window * 1000)},
        ).fetchall()
    return start, {str(sid): int(due) for sid, due in rows}


def fired(url: str) -> dict[str, Any]:
    """The ``due`` sessions' timeout rows, tool_end events, tool results and continuations."""
    with psycopg.connect(url, autocommit=True) as conn:
        usage = conn.execute(
            "SELECT u.session_id, u.timestamp FROM __agents_usage u JOIN __agents_states s"
            " USING (session_id) WHERE s.agent_type = 'due' AND u.source_type ="
            " 'client_tool_timeout'"
        ).fetchall()
        ends = conn.execute(
            "SELECT e.session_id, (extract(epoch FROM e.created_at) * 1000)::bigint"
            " FROM __agents_events e JOIN __agents_states s USING (session_id)"
            " WHERE s.agent_type = 'due' AND e.type = 'tool_end'"
            " AND e.data ->> 'errorCode' = 'client_tool_timeout'"
        ).fetchall()
        results = conn.execute(
            "SELECT count(*), count(DISTINCT (m.session_id, m.tool_call_id)) FROM __agents_messages m"
            " JOIN __agents_states s USING (session_id) WHERE s.agent_type = 'due'"
            " AND m.role = 'tool'"
        ).fetchone()
        by = conn.execute(
            "SELECT w.executor_id, count(*) FROM dbos.workflow_status w JOIN __agents_states s"
            " ON s.session_id = split_part(w.workflow_uuid, ':', 2)"
            " WHERE w.name = 'helix.turn.continue' AND s.agent_type = 'due' GROUP BY 1"
        ).fetchall()
        ended = conn.execute(
            "SELECT status, count(*) FROM __agents_states WHERE agent_type = 'due' GROUP BY 1"
        ).fetchall()
    assert results is not None
    return {
        "usage": usage,
        "ends": ends,
        "tool_results": int(results[0]),
        "calls_with_results": int(results[1]),
        "continuations_by_executor": {str(e): int(n) for e, n in by},
        "statuses": {str(st): int(n) for st, n in ended},
    }


def timeouts_so_far(url: str) -> int:
    """The timeouts committed so far (``-1`` when the server refused a connection: a shared
    server may be at its ``max_connections``; the next poll asks again)."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM __agents_usage WHERE source_type = 'client_tool_timeout'"
            ).fetchone()
    except psycopg.OperationalError:
        return -1
    return int(row[0]) if row else 0


def lateness(rows: list[Any], deadlines: dict[str, int]) -> list[float]:
    return [float(at - deadlines[sid]) for sid, at in rows if sid in deadlines]


async def deadline_phase(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Phase 4, with the two served processes running their keepers."""
    start, deadlines = spread_deadlines(url, args.lead, 60.0)
    last = start + 60_000
    # A light count while they fire (the full read joins DBOS's table: once, at the end).
    while time.time() * 1000 < last + args.grace * 1000:
        await asyncio.sleep(2.0)
        if timeouts_so_far(url) >= len(deadlines):
            break
    seen = fired(url)
    counts: dict[str, int] = {}
    for sid, _ in seen["ends"]:
        counts[sid] = counts.get(sid, 0) + 1
    usage_late = lateness(seen["usage"], deadlines)
    end_late = lateness(seen["ends"], deadlines)
    buckets = {}
    for b in range(6):
        lo, hi = start + b * 10_000, start + (b + 1) * 10_000
        late = [x for (sid, _), x in zip(seen["usage"], usage_late, strict=True)
                if lo <= deadlines[sid] < hi]  # fmt: skip
        if late:
            buckets[f"deadlines {b * 10}-{b * 10 + 10} s"] = spread(late)
    return {
        "calls": len(deadlines),
        "fired_usage_rows": len(seen["usage"]),
        "fired_tool_end_events": len(seen["ends"]),
        "calls_with_two_tool_end_events": sum(1 for n in counts.values() if n > 1),
        "tool_result_messages": seen["tool_results"],
        "calls_with_a_tool_result": seen["calls_with_results"],
        "continuations_by_executor": seen["continuations_by_executor"],
        "session_statuses": seen["statuses"],
        "lateness_ms_results_commit": spread(usage_late) if usage_late else None,
        "lateness_ms_tool_end_event": spread(end_late) if end_late else None,
        "lateness_ms_by_deadline_window": buckets,
        "within_5s": sum(1 for x in usage_late if x <= 5000),
    }


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
                report["deadline_keeper"] = await deadline_phase(url, args)
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
