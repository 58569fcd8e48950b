"""Benchmark: how round-trip throughput grows with processes of one fleet.

The round trip is ``bench/roundtrip.py``'s (its agent, ``helix_round_trip`` and
``raw_round_trip``, a raw DBOS workflow of the same shape). Each configuration ``PxC`` runs
``P`` worker processes with ``C`` concurrent clients each, all on one database, with distinct
executor ids (``bench-0``, ``bench-1``, ...) and one application version (``bench``): a fleet.
Each worker launches its own runtime, warms up (``--warmup`` round trips one at a time, then
one wave at its concurrency), and waits; the parent gives all workers one start time, and each
counts the round trips it completes in ``--seconds`` and its process CPU time over the same
window. Reported per kind and configuration:

- sessions/s: the workers' completed round trips per second, summed;
- CPU / round trip: the workers' process CPU time (``time.process_time``) per completed round
  trip (Postgres's CPU is not in it);
- machine CPU busy: the whole machine's busy share over the window (``/proc/stat``, all cores,
  Postgres and any other work included), to tell a saturated machine from a runtime that does
  not scale;
- ratios: each multi-process configuration over each single-process one, e.g.
  ``2x16/1x16`` and ``2x16/1x32`` (the fleet at concurrency 32 in all against one process at
  16 and at 32).

    .venv/bin/python bench/scaling.py [--seconds 20] [--kinds helix,raw]
        [--configs 1x16,1x32,2x16] [--warmup 10]

It creates its own database on the local Postgres (HELIX_TEST_PG_URL, an admin URL), runs
every configuration on it one after the other (kind by kind, so that the configurations of a
kind are measured close together), and drops it at the end. It prints the figures as JSON
and one summary line per kind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from roundtrip import ADMIN, AGENT, helix_round_trip, raw_round_trip, watch_parked

from helix_dbos.config import HelixSettings
from helix_dbos.runtime import AgentRuntime

#: Lines a worker writes for the parent start with this, so that any other output on stdout
#: (a library's print) cannot be mistaken for a report.
PREFIX = "SCALING "
KINDS = {"helix": ("helix", helix_round_trip), "raw": ("raw_dbos", raw_round_trip)}
#: A worker's launch (migrations, DBOS's launch) and warm-up, on a loaded machine.
READY_TIMEOUT = 180.0
#: After the measured window: in-flight round trips finish before a worker exits.
DRAIN_TIMEOUT = 60.0


# -- worker ---------------------------------------------------------------------------------


def emit(payload: dict[str, Any]) -> None:
    sys.stdout.write(PREFIX + json.dumps(payload) + "\n")
    sys.stdout.flush()


async def measure(
    fn: Any, rt: AgentRuntime, concurrency: int, seconds: float
) -> tuple[dict[str, float], list[asyncio.Task[None]]]:
    """``concurrency`` clients run round trips back to back for ``seconds``; the count and the
    CPU time are taken together when the window closes. Returns the figures and the clients,
    still finishing the round trips they were in."""
    completed = 0
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    deadline = t0 + seconds

    async def client() -> None:
        nonlocal completed
        while time.perf_counter() < deadline:
            await fn(rt)
            completed += 1

    clients = [asyncio.create_task(client()) for _ in range(concurrency)]
    await asyncio.sleep(seconds)
    # A busy event loop can wake this late: the window is what actually elapsed, and the count
    # is taken at the same moment.
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    return {"completed": completed, "elapsed": elapsed, "cpu_s": cpu}, clients


async def worker(args: argparse.Namespace) -> None:
    _, fn = KINDS[args.kind]
    settings = HelixSettings(
        database_url=args.url,
        # Distinct executors of one application version: DBOS and the fleet treat them as one
        # deployment's processes (each recovers only its own workflows).
        executor_id=f"bench-{args.index}",
        application_version="bench",
    )
    rt = AgentRuntime([AGENT], settings)
    await rt.launch()
    watch_parked(rt)
    try:
        for _ in range(args.warmup):
            await fn(rt)
        # One wave at the measured concurrency grows DBOS's thread pool and the connection
        # pools to their working size before the clock starts.
        await asyncio.gather(*[fn(rt) for _ in range(args.concurrency)])
        emit({"ready": True})
        # The parent's go: one start time for all workers (EOF, if the parent is gone, fails
        # the parse and ends the worker).
        line = await asyncio.to_thread(sys.stdin.readline)
        start_at = float(json.loads(line)["start_at"])
        await asyncio.sleep(max(0.0, start_at - time.time()))
        figures, clients = await measure(fn, rt, args.concurrency, args.seconds)
        emit({"result": figures})
        # Round trips in flight end before shutdown, so that none is left parked on the
        # database the next configuration uses.
        try:
            await asyncio.wait_for(asyncio.gather(*clients), timeout=DRAIN_TIMEOUT)
        except TimeoutError:
            for task in clients:
                task.cancel()
    finally:
        await rt.shutdown()


# -- parent ---------------------------------------------------------------------------------


def machine_cpu() -> tuple[int, int] | None:
    """(busy, total) jiffies of all cores since boot, or None where /proc/stat is missing."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user already).
    total = sum(fields[:8])
    return total - fields[3] - fields[4], total


async def expect(proc: asyncio.subprocess.Process, index: int, key: str, timeout: float) -> Any:
    """The next report of worker ``index`` carrying ``key``; other stdout lines are skipped."""
    stdout = proc.stdout
    assert stdout is not None

    async def read() -> Any:
        while True:
            line = (await stdout.readline()).decode()
            if not line:
                raise RuntimeError(f"worker {index} exited (code {await proc.wait()}) before {key}")
            if line.startswith(PREFIX):
                payload = json.loads(line[len(PREFIX) :])
                if key in payload:
                    return payload[key]

    return await asyncio.wait_for(read(), timeout=timeout)


async def run_config(
    url: str, kind: str, processes: int, concurrency: int, args: argparse.Namespace
) -> dict[str, Any]:
    procs: list[asyncio.subprocess.Process] = []
    try:
        for i in range(processes):
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                "--kind",
                kind,
                "--index",
                str(i),
                "--concurrency",
                str(concurrency),
                "--seconds",
                str(args.seconds),
                "--warmup",
                str(args.warmup),
                "--url",
                url,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            procs.append(proc)
            # One worker at a time up to its barrier: launches do not race on the fresh
            # database's migrations, and a warm-up does not eat into another's launch.
            await expect(proc, i, "ready", READY_TIMEOUT)
        # Far enough ahead for every worker to read its go before the window opens.
        start_at = time.time() + 1.0
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write((json.dumps({"start_at": start_at}) + "\n").encode())
            await proc.stdin.drain()
        await asyncio.sleep(max(0.0, start_at - time.time()))
        cpu0 = machine_cpu()
        await asyncio.sleep(args.seconds)
        cpu1 = machine_cpu()
        results = [
            await expect(proc, i, "result", args.seconds + READY_TIMEOUT)
            for i, proc in enumerate(procs)
        ]
        for proc in procs:
            await asyncio.wait_for(proc.wait(), timeout=DRAIN_TIMEOUT + 30)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    completed = sum(r["completed"] for r in results)
    figures: dict[str, Any] = {
        "sessions_per_s": sum(r["completed"] / r["elapsed"] for r in results),
        "sessions_per_s_per_process": [r["completed"] / r["elapsed"] for r in results],
        "completed": completed,
        "cpu_ms_per_round_trip": sum(r["cpu_s"] for r in results) * 1000 / max(completed, 1),
        "process_cpu_share": [r["cpu_s"] / r["elapsed"] for r in results],
    }
    if cpu0 is not None and cpu1 is not None and cpu1[1] > cpu0[1]:
        figures["machine_cpu_busy"] = (cpu1[0] - cpu0[0]) / (cpu1[1] - cpu0[1])
    return figures


def parse_configs(text: str) -> list[tuple[int, int]]:
    configs = []
    for item in text.split(","):
        processes, _, concurrency = item.strip().partition("x")
        configs.append((int(processes), int(concurrency)))
    return configs


async def parent(args: argparse.Namespace) -> dict[str, Any]:
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise SystemExit(f"unknown kinds {sorted(unknown)}: choose from {sorted(KINDS)}")
    configs = parse_configs(args.configs)
    name = f"helix_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = ADMIN.rpartition("/")[0] + "/" + name
    report: dict[str, Any] = {
        "seconds": args.seconds,
        "cpu_count": os.cpu_count(),
        "load_average_before": os.getloadavg()[0],
    }
    try:
        for kind in kinds:
            label, _ = KINDS[kind]
            section: dict[str, Any] = {}
            for processes, concurrency in configs:
                config = f"{processes}x{concurrency}"
                print(f"{label} {config} ...", file=sys.stderr, flush=True)
                section[config] = await run_config(url, kind, processes, concurrency, args)
            section["ratios"] = {
                f"{m}/{s}": section[m]["sessions_per_s"] / section[s]["sessions_per_s"]
                for m in section
                if not m.startswith("1x")
                for s in section
                if s.startswith("1x") and section[s]["sessions_per_s"]
            }
            report[label] = section
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return report


def rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def summary(label: str, section: dict[str, Any]) -> str:
    rates = ", ".join(
        f"{config} {figures['sessions_per_s']:.1f}/s"
        for config, figures in section.items()
        if config != "ratios"
    )
    ratios = ", ".join(f"{k} {v:.2f}x" for k, v in section["ratios"].items())
    return f"{label}: {rates}" + (f" ({ratios})" if ratios else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window")
    parser.add_argument("--kinds", default="helix,raw", help="helix, raw (raw DBOS) or both")
    parser.add_argument(
        "--configs",
        default="1x16,1x32,2x16",
        help="PROCESSESxCONCURRENCY, comma-separated (concurrency per process)",
    )
    parser.add_argument("--warmup", type=int, default=10, help="round trips before the window")
    # A worker process (started by the parent, not by hand).
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=16, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        code = 0
        try:
            asyncio.run(worker(args))
        except BaseException:
            traceback.print_exc()
            code = 1
        # DBOS's threads of the destroyed runtime retry their database (dropped at the end of
        # the run) for minutes: the report is written, nothing is left to do.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    report = asyncio.run(parent(args))
    print(json.dumps(rounded(report), indent=2))
    for key, section in report.items():
        if isinstance(section, dict):
            print(summary(key, section))


if __name__ == "__main__":
    main()
