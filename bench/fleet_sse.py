"""Benchmark: pushed event streams in a fleet, over HTTP, with real ``helix-dbos serve``
processes on one Postgres database.

1. Submit -> first continuation frame on the session's ``/sse`` stream, p50/p95 (ms): the
   client submits, then attaches to the stream from the pre-submit head (as the submit answer
   tells it to); the clock runs from sending the submit to the first event of the continued
   turn. "same" submits and streams on the process running the turn; "cross" on another
   process (the turn wakes by DBOS's NOTIFY, the stream by ours).
2. The query cost of idle open streams: N streams held open on sessions whose answers are
   stored but whose turns do not run (their process was SIGKILLed and the survivors' adoption
   window is longer than the benchmark), measured as the database's ``xact_commit`` rate with
   the streams open minus the rate with none, each over a fixed window.

    .venv/bin/python bench/fleet_sse.py [--iterations 40] [--streams 200] [--window 10]

It creates and drops its own database on the local Postgres (HELIX_TEST_PG_URL, an admin URL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg

ADMIN = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
RESULT = {"applied": 1, "failed": 0}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(
    url: str, name: str, logs: Path, **env: str
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "helix_dbos.cli",
            "serve",
            "--allow-unauthenticated",
            "--port",
            str(port),
        ],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("HELIX_")},
            "HELIX_DATABASE_URL": url,
            "HELIX_EXECUTOR_ID": f"bench-{name}",
            **env,
        },
        stdout=(logs / f"{name}.log").open("wb"),
        stderr=subprocess.STDOUT,
        cwd=logs,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError((logs / f"{name}.log").read_text()[-2000:])
        try:
            httpx.get(f"{base}/openapi.json", timeout=1).raise_for_status()
            return proc, base
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


async def park(client: httpx.AsyncClient, base: str) -> tuple[str, str, int]:
    """Start a turn on ``base``; wait until parked: (session, call, last event sequence)."""
    r = await client.post(f"{base}/start", json={"agentType": "editor", "message": "hi"})
    sid = r.json()["sessionId"]
    while True:
        view = (await client.get(f"{base}/status", params={"sessionId": sid})).json()
        if "pendingToolCalls" not in view:
            raise RuntimeError(view)
        calls = [p for p in view["pendingToolCalls"] if "submittedAt" not in p]
        if view["status"] == "suspended_client_tool" and calls:
            break
        await asyncio.sleep(0.01)
    events = (await client.get(f"{base}/sse", params={"sessionId": sid})).text
    last = max(int(line[4:]) for line in events.splitlines() if line.startswith("id: "))
    return sid, calls[0]["toolCallId"], last


async def submit_to_frame(
    client: httpx.AsyncClient, submit_base: str, stream_base: str, sid: str, call: str, last: int
) -> float:
    began = time.perf_counter()
    r = await client.post(
        f"{submit_base}/submit-tool-result",
        json={"sessionId": sid, "toolCallId": call, "result": RESULT},
    )
    assert r.status_code == 200 and r.json()["continuation"]["kind"] == "new_run", r.text
    SUBMIT_MS.append((time.perf_counter() - began) * 1000)
    params = {"sessionId": sid, "fromSequence": last + 1}
    async with client.stream("GET", f"{stream_base}/sse", params=params) as stream:
        async for line in stream.aiter_lines():
            if line.startswith("id: "):
                return (time.perf_counter() - began) * 1000
    raise RuntimeError("the stream ended without a continuation frame")


SUBMIT_MS: list[float] = []


def xacts(url: str) -> int:
    name = url.rpartition("/")[2]
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            (name,),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def rate(url: str, window: float) -> float:
    await asyncio.sleep(1.0)  # pg_stat counters are flushed about once a second
    before = xacts(url)
    await asyncio.sleep(window)
    return (xacts(url) - before) / window


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(iterations: int, streams: int, window: float) -> dict[str, Any]:
    name = f"helix_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{ADMIN.rpartition('/')[0]}/{name}"
    procs: list[subprocess.Popen[bytes]] = []
    out: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            logs = Path(tmp)
            # The survivors' adoption window outlasts the benchmark: phase 2's turns stay idle.
            slow = {"HELIX_ADOPT_AFTER_SECONDS": "3600"}
            pa, a = start_server(url, "a", logs, **slow)
            procs.append(pa)
            pb, b = start_server(url, "b", logs, **slow)
            procs.append(pb)
            limits = httpx.Limits(max_connections=streams + 50)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                for label, submit_base, stream_base in (("same", a, a), ("cross", b, b)):
                    samples = []
                    SUBMIT_MS.clear()
                    for i in range(iterations + 3):
                        sid, call, last = await park(client, a)
                        ms = await submit_to_frame(
                            client, submit_base, stream_base, sid, call, last
                        )
                        if i >= 3:  # warm-up
                            samples.append(ms)
                    out[f"submit_to_first_frame_{label}_ms"] = {
                        "p50": round(statistics.median(samples), 2),
                        "p95": round(pct(samples, 0.95), 2),
                        "n": len(samples),
                        "submit_answer_p50": round(statistics.median(SUBMIT_MS[3:]), 2),
                    }
                # Phase 2: idle streams on B, of turns whose process is gone.
                pc, c = start_server(url, "c", logs)
                procs.append(pc)
                gate = asyncio.Semaphore(16)

                async def park_one() -> tuple[str, str, int]:
                    async with gate:
                        return await park(client, c)

                parked = await asyncio.gather(*(park_one() for _ in range(streams)))
                pc.send_signal(signal.SIGKILL)
                pc.wait()
                for sid, call, _last in parked:
                    r = await client.post(
                        f"{b}/submit-tool-result",
                        json={"sessionId": sid, "toolCallId": call, "result": RESULT},
                    )
                    assert r.status_code == 200, r.text
                baseline = await rate(url, window)
                opened: list[Any] = []
                for sid, _call, last in parked:
                    ctx = client.stream(
                        "GET", f"{b}/sse", params={"sessionId": sid, "fromSequence": last + 1}
                    )
                    opened.append((ctx, await ctx.__aenter__()))
                await asyncio.sleep(5.0)  # every stream has done its first reads
                with_streams = await rate(url, window)
                again = await rate(url, window)
                alive = sum(1 for _ctx, resp in opened if not resp.is_closed)
                for ctx, _resp in opened:
                    await ctx.__aexit__(None, None, None)
                out["idle_streams"] = {
                    "streams_open": alive,
                    "xacts_per_s_without_streams": round(baseline, 2),
                    "xacts_per_s_with_streams": [round(with_streams, 2), round(again, 2)],
                    "xacts_per_s_after_closing": round(await rate(url, window), 2),
                    "window_s": window,
                }
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--window", type=float, default=10.0)
    ns = parser.parse_args()
    print(json.dumps(asyncio.run(main(ns.iterations, ns.streams, ns.window)), indent=2))
