"""Phases 2-4 of ``hibernation.py`` (a restart, submit -> first frame, the deadline keeper),
which run against ``helix-dbos serve`` processes, and the figures' helpers the two share.

Run ``hibernation.py``; this module only holds its served half.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

HERE = Path(__file__).resolve().parent
RESULT = {"applied": 1}
#: The served app: ``helix-dbos serve hibernation:AGENTS`` from this directory.
APP = "hibernation:AGENTS"


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


def serve(url: str, executor: str, logs: Path, code: Path | None = None) -> subprocess.Popen[bytes]:
    """``helix-dbos serve`` of ``AGENTS`` on ``url`` (this directory is its working directory,
    so that its ``APP`` imports this module); ``code``: the tree whose ``helix_dbos`` it runs
    (default: this one's)."""
    return subprocess.Popen(
        [sys.executable, "-m", "helix_dbos.cli", "serve", APP, "--allow-unauthenticated"]
        + ["--port", str(free_port())],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("HELIX_")},
            "HELIX_DATABASE_URL": url,
            "HELIX_EXECUTOR_ID": executor,
            "PYTHONPATH": str(code or HERE.parent),
        },
        stdout=(logs / f"{executor}.log").open("ab"),
        stderr=subprocess.STDOUT,
        cwd=HERE,
    )


def free_port() -> int:

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


def spread_deadlines(
    url: str, lead: float, window: float, limit: int | None = None
) -> tuple[int, dict[str, int]]:
    """Move the ``due`` sessions' deadlines (``limit`` of them, default all) to ``lead`` s from
    now, spread uniformly over ``window`` s: the pending entry's ``deadlineAt`` and the mark's
    ``dueAt`` (one statement, each row's version moved on as any write does). (start,
    session -> deadline)."""
    start = int((time.time() + lead) * 1000)
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "WITH d AS (SELECT session_id, (SELECT k FROM jsonb_object_keys("
            "pending_client_tool_calls) k LIMIT 1) AS tcid, %(start)s::bigint + ((row_number()"
            " OVER (ORDER BY md5(session_id)) - 1) * %(window)s::bigint) / count(*) OVER () AS due"
            " FROM (SELECT * FROM __agents_states WHERE agent_type = 'due'"
            " AND metadata ? 'hibernated' ORDER BY session_id LIMIT %(limit)s) AS due_rows)"
            " UPDATE __agents_states s SET pending_client_tool_calls = jsonb_set("
            "s.pending_client_tool_calls, ARRAY[d.tcid, 'deadlineAt'], to_jsonb(d.due)),"
            " metadata = jsonb_set(s.metadata, '{hibernated,dueAt}', to_jsonb(d.due)),"
            " version = s.version + 1, updated_at = now()"
            " FROM d WHERE s.session_id = d.session_id RETURNING s.session_id, d.due",
            {"start": start, "window": int(window * 1000), "limit": limit},
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


def timeouts_so_far(url: str, since_ms: int = 0) -> int:
    """The timeouts committed so far (since ``since_ms``: a range of the usage table's
    ``(source_type, timestamp)`` index, not every timeout ever; ``-1`` when the server refused
    a connection: a shared server may be at its ``max_connections``; the next poll asks
    again)."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM __agents_usage WHERE source_type = 'client_tool_timeout'"
                " AND timestamp >= %s",
                (since_ms,),
            ).fetchone()
    except psycopg.OperationalError:
        return -1
    return int(row[0]) if row else 0


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int, children: bool = False) -> float:
    """A process's CPU seconds (user + system, all its threads); with ``children``, also
    those of its children it has waited for (``cutime``, ``cstime``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICK


def postmaster_of(url: str) -> int | None:
    """The pid of the server's postmaster (the parent of a backend), when the server runs on
    this machine; ``None`` when its processes are not readable here."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        try:  # while the backend lives
            with open(f"/proc/{int(row[0])}/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
        except (OSError, StopIteration):
            return None


def cluster_cpu_seconds(postmaster: int) -> float:
    """The database server's CPU seconds: the postmaster with the backends it has reaped,
    and its live children."""
    total = cpu_seconds(postmaster, children=True)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
            except OSError:
                continue
            if ppid == postmaster:
                total += cpu_seconds(int(entry))
    return total


def cpu_snapshot(pids: list[int], postmaster: int | None) -> dict[str, float]:
    snap = {f"serve_{i}": cpu_seconds(pid) for i, pid in enumerate(pids)}
    if postmaster is not None:
        snap["postgres"] = cluster_cpu_seconds(postmaster)
    return snap


def cpu_report(
    before: dict[str, float], after: dict[str, float], fired: int, seconds: float
) -> dict[str, Any]:
    """CPU seconds spent from the first deadline to the end of the phase, and per fired call
    (ms)."""
    used = {k: after[k] - before[k] for k in before}
    total = sum(used.values())
    return {
        "seconds": round(seconds, 1),
        "cpu_s": {k: round(v, 2) for k, v in used.items()},
        "cpu_ms_per_fired": {k: round(1000 * v / max(fired, 1), 2) for k, v in used.items()},
        "cpu_ms_per_fired_total": round(1000 * total / max(fired, 1), 2),
        "fired_per_s": round(fired / max(seconds, 1e-9), 1),
    }


def lateness(rows: list[Any], deadlines: dict[str, int]) -> list[float]:
    return [float(at - deadlines[sid]) for sid, at in rows if sid in deadlines]


async def deadline_phase(
    url: str, args: argparse.Namespace, servers: list[int] | None = None
) -> dict[str, Any]:
    """Phase 4, with the two served processes (pids ``servers``) running their keepers.

    The CPU time of the servers and of the database server (when it runs on this machine) is
    read at the first deadline and once every call fired (or the grace ran out)."""
    postmaster = postmaster_of(url)
    start, deadlines = spread_deadlines(url, args.lead, 60.0, getattr(args, "deadlines", None))
    last = start + 60_000
    await asyncio.sleep(max(0.0, start / 1000 - time.time()))
    cpu_before, clock = cpu_snapshot(servers or [], postmaster), time.perf_counter()
    # A light count while they fire (the full read joins DBOS's table: once, at the end).
    while time.time() * 1000 < last + args.grace * 1000:
        await asyncio.sleep(1.0)
        if timeouts_so_far(url, start) >= len(deadlines):
            break
    cpu_after, clock = cpu_snapshot(servers or [], postmaster), time.perf_counter() - clock
    seen = fired(url)
    # This phase's calls only (an earlier phase on the same database fired others).
    seen["usage"] = [(sid, at) for sid, at in seen["usage"] if sid in deadlines]
    seen["ends"] = [(sid, at) for sid, at in seen["ends"] if sid in deadlines]
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
        "cpu_from_first_deadline": cpu_report(cpu_before, cpu_after, len(seen["usage"]), clock),
    }
