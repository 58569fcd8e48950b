"""Benchmark: pushed event streams in a fleet, over HTTP, with real ``helix-dbos serve``
processes on one Postgres database.

1. Submit -> first continuation frame on the session's ``/sse`` stream, p50/p95 (ms): the
   client submits, then attaches to the stream from the pre-submit head (as the submit answer
   tells it to); the clock runs from sending the submit to the first event of the continued
   turn (its ``tool_end``, which the turn commits: the submit writes no event). "same" submits
   and streams on the process running the turn; "cross" on another process (the turn wakes by
   DBOS's NOTIFY, the stream by ours). Each hop is timed on one clock: the benchmark LISTENs on
   DBOS's message channel (the submit's commit) and on the events channel (the turn's commit),
   and reads DBOS's step records (the ``recv`` that consumed the answer, the start of the
   commit step).
2. The query cost of idle open streams: N streams held open on sessions whose answers are
   stored but whose turns do not run (their process was SIGKILLed and the survivors' adoption
   window is longer than the benchmark), measured per statement with ``pg_stat_statements``
   over a fixed window with no stream open, twice with the streams open, and after closing
   them; the statements the streams ran while opening are listed with their calls while idle.

    .venv/bin/python bench/fleet_sse.py [--iterations 40] [--streams 200] [--window 10]
        [--shared]

It starts a private Postgres cluster (initdb + pg_ctl on a free port, with
``pg_stat_statements`` preloaded) so that nothing else runs statements on it, and removes it
at the end. ``--shared`` uses the local server instead (HELIX_TEST_PG_URL, an admin URL; its
database is created and dropped), where only ``pg_stat_database``'s transaction counts are
available.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.faults.pgcluster import PrivateCluster, pg_available

SHARED_ADMIN = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
RESULT = {"applied": 1, "failed": 0}
#: The private cluster: statements counted per query, durable commits as in production.
CLUSTER_CONF = (
    "\n# fleet_sse benchmark\n"
    "shared_preload_libraries = 'pg_stat_statements'\n"
    "pg_stat_statements.track = top\n"
    "pg_stat_statements.track_utility = on\n"
    "fsync = on\n"
    "full_page_writes = on\n"
    "shared_buffers = 128MB\n"
)
#: The survivors neither adopt phase 2's stranded turns nor re-send their wake-ups while the
#: benchmark runs: those turns exist only to hold streams open on a turn that does not move.
SLOW = {"HELIX_ADOPT_AFTER_SECONDS": "3600", "HELIX_HEAL_GRACE_SECONDS": "3600"}


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


class Notes:
    """The benchmark's own LISTEN on DBOS's message channel and on the events channel: the
    moment (this process's clock) each commit's NOTIFY arrives, by channel and payload."""

    CHANNELS = ("dbos_notifications_channel", "__agents_events")

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        for channel in self.CHANNELS:
            self._conn.execute(f'LISTEN "{channel}"')
        self.seen: dict[tuple[str, str], list[float]] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(psycopg.Error):
            for note in self._conn.notifies():
                at = time.time()
                with self._lock:
                    self.seen.setdefault((note.channel, note.payload), []).append(at)

    def first_after(self, channel: str, payload_start: str, after: float) -> float | None:
        with self._lock:
            times = [
                t
                for (ch, payload), ts in self.seen.items()
                if ch == channel and payload.startswith(payload_start)
                for t in ts
                if t >= after
            ]
        return min(times) if times else None

    def close(self) -> None:
        self._conn.close()  # ends the notifies() generator


async def park(client: httpx.AsyncClient, base: str) -> tuple[str, str, int]:
    """Start a turn on ``base``; wait until parked: (session, call, last event sequence)."""
    message = 'replace "a" with "b"'  # the demo editor parks on editContent
    r = await client.post(f"{base}/start", json={"agentType": "editor", "message": message})
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
) -> dict[str, Any]:
    """One round: the client's times (wall clock, s) and the first continuation event."""
    sent = time.time()
    r = await client.post(
        f"{submit_base}/submit-tool-result",
        json={"sessionId": sid, "toolCallId": call, "result": RESULT},
    )
    answered = time.time()
    assert r.status_code == 200 and r.json()["continuation"]["kind"] == "new_run", r.text
    params: dict[str, str | int] = {"sessionId": sid, "fromSequence": last + 1}
    async with client.stream("GET", f"{stream_base}/sse", params=params) as stream:
        headers = time.time()
        event_id = None
        async for line in stream.aiter_lines():
            if line.startswith("id: "):
                event_id = line  # an event's frame (a ``pending`` list has no id)
            elif line.startswith("data: ") and event_id is not None:
                return {
                    "sent": sent,
                    "answered": answered,
                    "headers": headers,
                    "frame": time.time(),
                    "type": json.loads(line[6:])["type"],
                }
    raise RuntimeError("the stream ended without a continuation frame")


def dbos_times(url: str, sid: str) -> dict[str, float]:
    """DBOS's records of the continued turn (epoch ms -> s): the ``recv`` that consumed the
    answer (its completion) and the results commit (its start)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT function_name, started_at_epoch_ms, completed_at_epoch_ms"
            " FROM dbos.operation_outputs WHERE workflow_uuid LIKE %s ORDER BY function_id",
            (f"helix:{sid}:%",),
        ).fetchall()
        # Layout 2 records the results commit as its own checkpoint, not as a DBOS step: its
        # time is the checkpoint's (taken as the commit's statement is built).
        checkpoint = conn.execute(
            "SELECT extract(epoch FROM min(created_at)) FROM __agents_checkpoints"
            " WHERE checkpoint_id LIKE %s",
            (f"helix:{sid}:%:results",),
        ).fetchone()
    out: dict[str, float] = {}
    for name, started, completed in rows:
        if name == "DBOS.recv" and completed is not None:
            out["recv_consumed"] = completed / 1000
        elif name == "helix.turn.commit_results" and started is not None:
            out.setdefault("commit_step_started", started / 1000)
    if checkpoint is not None and checkpoint[0] is not None and "commit_step_started" not in out:
        out["commit_step_started"] = float(checkpoint[0])
    return out


HOPS = (
    # (label, from, to): each a point on the one clock.
    ("submit committed (DBOS message NOTIFY)", "sent", "submit_commit"),
    ("submit answer at the client", "sent", "answered"),
    ("stream headers at the client", "sent", "headers"),
    ("turn's recv consumed the answer", "sent", "recv_consumed"),
    ("turn's results commit started", "sent", "commit_step_started"),
    ("turn's events committed (events NOTIFY)", "sent", "events_commit"),
    ("first continuation frame at the client", "sent", "frame"),
)


def hop_table(rounds: list[dict[str, float]]) -> dict[str, Any]:
    """Median time of each point after the submit was sent, and of each hop between them."""
    table: dict[str, Any] = {}
    for label, start, end in HOPS:
        values = [(r[end] - r[start]) * 1000 for r in rounds if end in r and start in r]
        if values:
            table[label] = round(statistics.median(values), 1)
    gaps = {
        "submit commit -> recv consumed": ("submit_commit", "recv_consumed"),
        "recv consumed -> results commit started": ("recv_consumed", "commit_step_started"),
        "results commit started -> events committed": ("commit_step_started", "events_commit"),
        "events committed -> frame at the client": ("events_commit", "frame"),
        "submit answer -> stream headers": ("answered", "headers"),
    }
    for label, (start, end) in gaps.items():
        values = [(r[end] - r[start]) * 1000 for r in rounds if end in r and start in r]
        if values:
            table[label] = round(statistics.median(values), 1)
    return table


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- statement counts ---------------------------------------------------------------------------


class Counter:
    """The database's statements (``pg_stat_statements``, when loaded) and transactions."""

    def __init__(self, admin: str, url: str) -> None:
        self.admin = admin
        self.url = url
        self.name = url.rpartition("/")[2]
        with psycopg.connect(admin, autocommit=True) as conn:
            libs = conn.execute("SHOW shared_preload_libraries").fetchone()
        self.statements = libs is not None and "pg_stat_statements" in str(libs[0])
        if self.statements:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def xacts(self) -> int:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                (self.name,),
            ).fetchone()
        assert row is not None
        return int(row[0])

    def snapshot(self) -> dict[int, tuple[str, int]]:
        """Calls per statement of the benchmark's database (not the benchmark's own reads)."""
        if not self.statements:
            return {}
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT s.queryid, s.query, s.calls FROM pg_stat_statements s"
                " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s"
                " AND s.query NOT LIKE %s AND s.query NOT LIKE %s",
                (self.name, "%pg_stat_statements%", "%pg_stat_database%"),
            ).fetchall()
        return {int(qid): (str(q), int(calls)) for qid, q, calls in rows}

    async def window(self, seconds: float) -> dict[str, Any]:
        """Statements and transactions per second over ``seconds`` of doing nothing."""
        await asyncio.sleep(1.0)  # pg_stat counters are flushed about once a second
        before, xacts = self.snapshot(), self.xacts()
        await asyncio.sleep(seconds)
        after, xacts_after = self.snapshot(), self.xacts()
        calls = diff(before, after)
        return {
            "xacts_per_s": round((xacts_after - xacts) / seconds, 2),
            "statements_per_s": round(sum(calls.values()) / seconds, 2)
            if self.statements
            else None,
            "calls": calls,
        }


def label(query: str) -> str:
    """A statement, short: its select list elided (what tells statements apart is the rest)."""
    text = " ".join(query.split())
    at = text.find(" FROM ")
    if text.startswith("SELECT ") and at > 60 and not text[at + 6 :].startswith("(SELECT"):
        text = "SELECT ... FROM " + text[at + 6 :]
    return text[:200]


def diff(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]]) -> dict[str, int]:
    """Calls per statement between two snapshots."""
    out: dict[str, int] = {}
    for qid, (query, calls) in after.items():
        n = calls - before.get(qid, (query, 0))[1]
        if n > 0:
            key = label(query)
            out[key] = out.get(key, 0) + n
    return out


@contextlib.contextmanager
def database(shared: bool) -> Iterator[tuple[str, str]]:
    """(admin URL, a fresh database's URL): on a private cluster, else on the shared server."""
    if not shared:
        if not pg_available():
            raise SystemExit("no PostgreSQL server binaries here: run with --shared")
        with PrivateCluster.create(CLUSTER_CONF) as cluster:
            yield cluster.admin_url, cluster.create_database()
        return
    name = f"helix_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(SHARED_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield SHARED_ADMIN, f"{SHARED_ADMIN.rpartition('/')[0]}/{name}"
    finally:
        with psycopg.connect(SHARED_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def latency(
    client: httpx.AsyncClient, url: str, a: str, b: str, iterations: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    notes = Notes(url)
    try:
        for label, submit_base, stream_base in (("same", a, a), ("cross", b, b)):
            rounds: list[dict[str, float]] = []
            types: dict[str, int] = {}
            for i in range(iterations + 3):
                sid, call, last = await park(client, a)
                r = await submit_to_frame(client, submit_base, stream_base, sid, call, last)
                if i < 3:  # warm-up
                    continue
                kind = str(r.pop("type"))
                types[kind] = types.get(kind, 0) + 1
                await asyncio.sleep(0.2)  # the turn's later steps and their NOTIFYs land
                sc = notes.first_after("dbos_notifications_channel", f"helix:{sid}:", r["sent"])
                ec = notes.first_after("__agents_events", sid, r["sent"])
                if sc is not None:
                    r["submit_commit"] = sc
                if ec is not None:
                    r["events_commit"] = ec
                r.update(dbos_times(url, sid))
                rounds.append(r)
            frames = [(r["frame"] - r["sent"]) * 1000 for r in rounds]
            answers = [(r["answered"] - r["sent"]) * 1000 for r in rounds]
            out[f"submit_to_first_frame_{label}_ms"] = {
                "p50": round(statistics.median(frames), 2),
                "p95": round(pct(frames, 0.95), 2),
                "n": len(frames),
                "submit_answer_p50": round(statistics.median(answers), 2),
                "first_frame_types": types,
                "hops_p50_ms": hop_table(rounds),
            }
    finally:
        notes.close()
    return out


async def idle(
    client: httpx.AsyncClient,
    url: str,
    counter: Counter,
    b: str,
    c: str,
    pc: Any,
    n: int,
    window: float,
) -> dict[str, Any]:
    """Phase 2: ``n`` idle streams on B, of turns whose process (C) is gone."""
    gate = asyncio.Semaphore(16)

    async def park_one() -> tuple[str, str, int]:
        async with gate:
            return await park(client, c)

    parked = await asyncio.gather(*(park_one() for _ in range(n)))
    pc.send_signal(signal.SIGKILL)
    pc.wait()
    for sid, call, _last in parked:
        r = await client.post(
            f"{b}/submit-tool-result",
            json={"sessionId": sid, "toolCallId": call, "result": RESULT},
        )
        assert r.status_code == 200, r.text
    without = await counter.window(window)
    before_open = counter.snapshot()
    opened: list[Any] = []
    for sid, _call, last in parked:
        ctx = client.stream("GET", f"{b}/sse", params={"sessionId": sid, "fromSequence": last + 1})
        opened.append((ctx, await ctx.__aenter__()))
    await asyncio.sleep(5.0)  # every stream has done its first reads
    opening = diff(before_open, counter.snapshot())
    with_streams = [await counter.window(window), await counter.window(window)]
    alive = sum(1 for _ctx, resp in opened if not resp.is_closed)
    for ctx, _resp in opened:
        await ctx.__aexit__(None, None, None)
    after = await counter.window(window)
    windows = [without, *with_streams, after]
    out: dict[str, Any] = {
        "streams_open": alive,
        "window_s": window,
        "xacts_per_s": {
            "without_streams": without["xacts_per_s"],
            "with_streams": [w["xacts_per_s"] for w in with_streams],
            "after_closing": after["xacts_per_s"],
        },
    }
    if counter.statements:
        # The statements the streams ran while opening (their reads), and how often each ran
        # in the idle windows: with the streams open they must not run more than without.
        stream_statements = {
            q: [w["calls"].get(q, 0) for w in windows]
            for q in sorted(opening, key=lambda q: opening[q])
        }
        out["statements_per_s"] = {
            "without_streams": without["statements_per_s"],
            "with_streams": [w["statements_per_s"] for w in with_streams],
            "after_closing": after["statements_per_s"],
        }
        out["opening_statements"] = {q: opening[q] for q in stream_statements}
        out["opening_statements_calls_per_window"] = stream_statements
        background: dict[str, list[int]] = {}
        for i, w in enumerate(windows):
            for q, calls in w["calls"].items():
                background.setdefault(q, [0] * len(windows))[i] = calls
        out["all_statements_calls_per_window"] = dict(
            sorted(background.items(), key=lambda kv: -sum(kv[1]))
        )
        out["windows"] = ["without streams", "with streams", "with streams", "after closing"]
    return out


async def main(iterations: int, streams: int, window: float, shared: bool) -> dict[str, Any]:
    procs: list[subprocess.Popen[bytes]] = []
    out: dict[str, Any] = {}
    with database(shared) as (admin, url), tempfile.TemporaryDirectory() as tmp:
        try:
            counter = Counter(admin, url)
            logs = Path(tmp)
            pa, a = start_server(url, "a", logs, **SLOW)
            procs.append(pa)
            pb, b = start_server(url, "b", logs, **SLOW)
            procs.append(pb)
            limits = httpx.Limits(max_connections=streams + 50)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                if iterations > 0:
                    out.update(await latency(client, url, a, b, iterations))
                if streams > 0:
                    pc, c = start_server(url, "c", logs)
                    procs.append(pc)
                    out["idle_streams"] = await idle(
                        client, url, counter, b, c, pc, streams, window
                    )
            out["database"] = "shared server" if shared else "private cluster"
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument(
        "--shared", action="store_true", help="use the local server (HELIX_TEST_PG_URL)"
    )
    ns = parser.parse_args()
    print(json.dumps(asyncio.run(main(ns.iterations, ns.streams, ns.window, ns.shared)), indent=2))
