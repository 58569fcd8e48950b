"""Benchmark: the in-process client-tool round trip, against a raw DBOS workflow of the same
shape (model step, park on recv, submit, model step), measured in the same run. Two helix
kinds: ``helix``, whose turn waits live for its submit (its agent never hibernates), and
``helix_hibernated``, whose turn hibernates as it parks (a hot window of 0), so that its
submit starts the continuation workflow from the session's record.

Reports suspend, resume and answer p50/p95 (ms), CPU per round trip (ms: the process's, and
Postgres's, the backends serving this benchmark's database), SQL statements per
round trip (every statement a psycopg cursor of the process sends: ours and DBOS's),
sessions/s at concurrency 1 and 16, RSS per parked session with N parked (and the process's
threads before and after parking them), and Postgres transactions per round trip
(xact_commit delta), with the ratio helix / raw of each.

    .venv/bin/python bench/roundtrip.py [--iterations 200] [--parked 1000]
    .venv/bin/python bench/roundtrip.py --only round-trip --iterations 200
    .venv/bin/python bench/roundtrip.py --only hot      # or: --only hibernated
    .venv/bin/python bench/roundtrip.py --only parked --parked 10000
    .venv/bin/python bench/roundtrip.py --only parked --parked 1000 --trace-files

``--trace-files`` also diffs tracemalloc snapshots taken before and after parking and prints
the bytes per parked session grouped by source file (tracing inflates RSS: read its RSS
figure as void).

It creates and drops its own database on the local Postgres (HELIX_TEST_PG_URL, an admin URL).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import json
import os
import resource
import statistics
import sys
import threading
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast

import psycopg
from dbos import DBOS, SetWorkflowID
from pydantic import BaseModel

from helix_dbos.config import HelixSettings
from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.runtime import AgentRuntime, TurnHandle, names
from helix_dbos.runtime._hibernated.continuation import run_continuation
from helix_dbos.runtime._turn.hibernation import hot_window

ADMIN = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


class In(BaseModel):
    text: str


class Out(BaseModel):
    applied: int


def script(request: LLMRequest) -> LLMResponse:
    if request.messages[-1].role == "user":
        return call(request, ("edit", {"text": "x"}))
    return reply("done")


# Long enough for 10,000 turns to park and stay parked while they are measured.
EDIT = define_tool("edit", "edit", In, Out, execute="client", client_tool_timeout=3600)

AGENT = define_agent(
    "bench",
    # A real adapter keeps no conversation; neither does the benchmark's scripted model.
    llm=ScriptedLLM(script, keep_requests=0),
    tools=[EDIT],
    # The hot round trip wakes a live park: however slow the machine, its turns never
    # hibernate while they are measured (nor the parked ones while their memory is).
    hibernate_after="never",
)

HIBERNATING = define_agent(
    "bench_hibernating",
    llm=ScriptedLLM(script, keep_requests=0),
    tools=[EDIT],
    # The hibernated round trip: the turn parks, hibernates at once, and its submit starts
    # the continuation from the record.
    hibernate_after=0,
)


class ParkedSet(set[str]):
    """A set of parked workflow ids whose additions wake the clients waiting for them.

    The clients wait for a workflow to park (``wait_in``) without polling: a poll every
    fraction of a millisecond kept the event loop spinning while a turn ran, which cost CPU
    (counted in the figures) and, with many clients, time.
    """

    def __init__(self) -> None:
        super().__init__()
        self.waiters: dict[str, asyncio.Future[None]] = {}

    def add(self, key: str) -> None:
        super().add(key)
        waiter = self.waiters.pop(key, None)
        if waiter is not None:
            # A recovered workflow parks on DBOS's own loop: wake the client's loop safely.
            waiter.get_loop().call_soon_threadsafe(_resolve, waiter)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


_raw_parked = ParkedSet()
_statements = 0


def _counted(cls: Any, name: str) -> None:
    """Count every statement a psycopg cursor sends: SQLAlchemy's, DBOS's, and those the
    store sends on the driver connection itself (which SQLAlchemy's events never see). The
    pool's pre-ping (``;``) is left out, as SQLAlchemy's events always left it out."""
    original = getattr(cls, name)

    if inspect.iscoroutinefunction(original):

        async def counted_async(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            global _statements
            _statements += query != ";"
            return await original(self, query, *args, **kwargs)

        setattr(cls, name, counted_async)
    else:

        def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            global _statements
            _statements += query != ";"
            return original(self, query, *args, **kwargs)

        setattr(cls, name, counted)


for _cls in (psycopg.Cursor, psycopg.AsyncCursor):
    for _name in ("execute", "executemany"):
        _counted(_cls, _name)


#: When each session's (helix) or workflow's (raw) latest answer was there: the last commit
#: with events of a helix session (``watch_parked``), the start of a raw workflow's model step.
_answered: dict[str, float] = {}
#: Off while turns are parked for the memory figures (their entries would count as memory).
_timing_answers = True


@DBOS.step(name="bench.raw.model")
async def raw_model(i: int) -> dict[str, Any]:
    # Its output is recorded after this: a raw answer's time is counted early, not late.
    if _timing_answers:
        _answered[DBOS.workflow_id or ""] = time.perf_counter()
    return {"toolCallId": f"tc-{i}"}


@DBOS.workflow(name="bench.raw.turn")
async def raw_turn(i: int) -> Any:
    first = await raw_model(i)
    wid = DBOS.workflow_id or ""
    _raw_parked.add(wid)
    try:
        answer = await DBOS.recv_async(first["toolCallId"], timeout_seconds=3600)
    finally:
        _raw_parked.discard(wid)
    await raw_model(i + 1)
    return answer


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def os_threads() -> int:
    """The process's OS threads (Python's and native ones, e.g. a driver's)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return threading.active_count()


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 2 else max(values)


async def wait_in(container: ParkedSet, key: str) -> None:
    """Until ``key`` is in ``container``."""
    if key in container:
        return
    waiter = container.waiters[key] = asyncio.get_running_loop().create_future()
    if key in container:  # parked between the check and the registration
        container.waiters.pop(key, None)
        return
    await waiter


def watch_parked(rt: AgentRuntime) -> None:
    """Make the runtime's set of parked turns a ``ParkedSet`` (before any turn parks), and
    note when each session's commits with events land (``_answered``)."""
    rt.ctx.parked = ParkedSet()
    wake = rt.store.on_events

    def on_events(sessions: set[str]) -> None:
        if _timing_answers:
            at = time.perf_counter()
            for session_id in sessions:
                _answered[session_id] = at
        if wake is not None:
            wake(sessions)

    rt.store.on_events = on_events


_TICK = os.sysconf("SC_CLK_TCK")


class Backends:
    """The CPU of the Postgres backends serving the benchmark's database (every connection
    of the runtime: ours and DBOS's), read from ``/proc`` on this machine. Its own connection,
    which asks for their pids, is left out. A backend that exits between two readings takes
    its CPU with it (the pools keep theirs open: few do)."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)

    def seconds(self) -> dict[int, float]:
        """Each backend's CPU seconds (user + system) by pid; empty where ``/proc`` does not
        show them (a server on another machine)."""
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        found: dict[int, float] = {}
        for (pid,) in rows:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
            except OSError:
                continue
            found[int(pid)] = (int(fields[11]) + int(fields[12])) / _TICK
        return found

    @staticmethod
    def spent(before: dict[int, float], after: dict[int, float]) -> float:
        """CPU seconds spent between two readings (a backend new since counts from 0)."""
        return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def xacts(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def check_windows() -> None:
    """Refuse to measure with agents whose hot windows are not what their kinds measure."""
    if hot_window(AGENT) is not None or hot_window(HIBERNATING) != 0:
        raise RuntimeError("The hot agent must never hibernate, the hibernating one at once")


def ended(outcome: Any, expected: str) -> None:
    """Refuse a turn's outcome that is not ``expected``: a figure must measure its kind."""
    found = outcome.get("outcome") if isinstance(outcome, dict) else outcome
    if found != expected:
        raise RuntimeError(f"A measured turn ended {found!r}, not {expected!r}")


async def helix_round_trip(
    rt: AgentRuntime, session_id: str | None = None
) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    handle = await rt.start(AGENT.name, "go", session_id=session_id)
    await wait_in(cast(ParkedSet, rt.ctx.parked), handle.workflow_id or "")
    t1 = time.perf_counter()
    state = await rt.session(handle.session_id)
    (tcid,) = state.pending
    t2 = time.perf_counter()
    await rt.submit_tool_result(handle.session_id, tcid, result={"applied": 1})
    # The turn's own workflow, not ``handle.result()``: that one would follow a turn that
    # hibernated into its continuation, and the check below would not see it.
    outcome = await handle.workflow.get_result()
    t3 = time.perf_counter()
    ended(outcome, "completed")
    # The final answer's commit is the session's last with events.
    answered = _answered.pop(handle.session_id)
    return (t1 - t0) * 1000, (t3 - t2) * 1000, (answered - t2) * 1000


#: The in-process handles of the continuations this process starts, by workflow id.
_continuations: dict[str, Any] = {}


def record_continuations() -> None:
    """Keep the handle of every continuation this process starts (``_continuations``).

    ``TurnHandle.result()`` follows a hibernated turn into its continuation through
    ``DBOS.retrieve_workflow_async``, whose handle polls the database for the result (once a
    second by default): the hibernated resume would measure that poll. The handle DBOS's start
    returns waits on the workflow's task, as the hot kind's handle does.
    """
    start = DBOS.start_workflow_async

    async def recording(func: Any, *args: Any, **kwargs: Any) -> Any:
        handle = await start(func, *args, **kwargs)
        if func is run_continuation:
            _continuations[handle.workflow_id] = handle
        return handle

    DBOS.start_workflow_async = staticmethod(recording)  # type: ignore[method-assign]


async def hibernate(rt: AgentRuntime) -> TurnHandle:
    """Start a turn of the hibernating agent; its handle once its workflow has hibernated."""
    handle = await rt.start(HIBERNATING.name, "go")
    ended(await handle.workflow.get_result(), "hibernated")
    return handle


async def hibernated_round_trip(rt: AgentRuntime) -> tuple[float, float, float]:
    """The round trip of a turn that hibernated before its submit: suspend ends when the
    turn's first workflow has ended hibernated, resume when the continuation the submit
    started has."""
    t0 = time.perf_counter()
    handle = await hibernate(rt)
    t1 = time.perf_counter()
    state = await rt.session(handle.session_id)
    (tcid,) = state.pending
    t2 = time.perf_counter()
    await rt.submit_tool_result(handle.session_id, tcid, result={"applied": 1})
    continuation = _continuations.pop(
        names.continuation_workflow_id(handle.session_id, state.run_id or "")
    )
    outcome = await continuation.get_result()
    t3 = time.perf_counter()
    ended(outcome, "completed")
    answered = _answered.pop(handle.session_id)
    return (t1 - t0) * 1000, (t3 - t2) * 1000, (answered - t2) * 1000


#: Sessions whose first turn ended, each kept for one follow-up message (``follow_up``).
_ended: list[str] = []


async def end_sessions(rt: AgentRuntime, n: int) -> None:
    """Fill ``_ended`` with ``n`` sessions whose first round trip completed (16 at a time)."""
    sem = asyncio.Semaphore(16)

    async def one() -> None:
        async with sem:
            handle = await rt.start("bench", "go")
            await wait_in(cast(ParkedSet, rt.ctx.parked), handle.workflow_id or "")
            (tcid,) = (await rt.session(handle.session_id)).pending
            await rt.submit_tool_result(handle.session_id, tcid, result={"applied": 1})
            await handle.result()
            _ended.append(handle.session_id)

    await asyncio.gather(*[one() for _ in range(n)])


async def follow_up_round_trip(rt: AgentRuntime) -> tuple[float, float, float]:
    """The round trip of a session's second message: its conversation is the first round
    trip's four messages, the same for every one (each session takes one follow-up)."""
    return await helix_round_trip(rt, _ended.pop())


async def raw_round_trip(_rt: AgentRuntime) -> tuple[float, float, float]:
    i = uuid.uuid4().int % 10**9
    wid = f"raw-{uuid.uuid4().hex}"
    t0 = time.perf_counter()
    with SetWorkflowID(wid):
        handle = await DBOS.start_workflow_async(raw_turn, i)
    await wait_in(_raw_parked, wid)
    t1 = time.perf_counter()
    await DBOS.send_async(wid, {"applied": 1}, topic=f"tc-{i}", idempotency_key=f"{wid}:tc")
    await handle.get_result()
    t2 = time.perf_counter()
    return (t1 - t0) * 1000, (t2 - t1) * 1000, (_answered.pop(wid) - t1) * 1000


#: Round trips per block: the kinds take turns block by block (see ``interleaved``).
BLOCK = 10
WARM_UP = 10
CONCURRENCIES = (1, 16)
#: Throughput blocks per kind and concurrency (the kinds take turns block by block).
THROUGHPUT_BLOCKS = 4
XACTS_ROUND_TRIPS = 50


def per_block(concurrency: int, total: int) -> int:
    """Round trips in one throughput block: ``total`` over the blocks, at least one per client."""
    return max(concurrency, total // THROUGHPUT_BLOCKS)


def round_trips_per_kind(n: int, total: int) -> int:
    """How many round trips ``interleaved`` runs of each kind: warm-up, latency blocks,
    throughput blocks at each concurrency, and the transactions count."""
    latency = max(1, n // BLOCK) * BLOCK
    throughput = sum(THROUGHPUT_BLOCKS * per_block(c, total) for c in CONCURRENCIES)
    return WARM_UP + latency + throughput + XACTS_ROUND_TRIPS


class _Tally:
    """One kind's measured round trips, block by block."""

    def __init__(self) -> None:
        self.suspend: list[float] = []
        self.resume: list[float] = []
        self.answer: list[float] = []
        self.cpu = 0.0
        self.pg_cpu = 0.0
        self.statements = 0
        self.rates: dict[int, list[float]] = {}


async def interleaved(
    kinds: dict[str, Any], rt: AgentRuntime, url: str, n: int, total: int
) -> dict[str, dict[str, float]]:
    """Measure the kinds in turns of ``BLOCK`` round trips (and throughput in turns too), so
        that a machine whose speed drifts during the run (other work, a busy neighbour) weighs on
        every kind alike: the ratios compare like with like. Transactions per round trip are
    counted apart, one kind at a time (``xacts_per_round_trip``).

        Latency: ``n`` round trips per kind, one at a time. Throughput: ``total`` round trips per
        kind at concurrency 1 and 16, in blocks of ``total / 4``; the rate is the blocks' total
        over their summed time.
    """
    tallies = {label: _Tally() for label in kinds}
    backends = Backends(url)
    for fn in kinds.values():
        for _ in range(WARM_UP):
            await fn(rt)
    for _ in range(max(1, n // BLOCK)):
        for label, fn in kinds.items():
            tally = tallies[label]
            pg0 = backends.seconds()
            cpu0, statements0 = time.process_time(), _statements
            for _ in range(BLOCK):
                s, r, a = await fn(rt)
                tally.suspend.append(s)
                tally.resume.append(r)
                tally.answer.append(a)
            tally.cpu += time.process_time() - cpu0
            tally.pg_cpu += Backends.spent(pg0, backends.seconds())
            tally.statements += _statements - statements0
    for concurrency in CONCURRENCIES:
        for _ in range(THROUGHPUT_BLOCKS):
            for label, fn in kinds.items():
                elapsed = await throughput(fn, rt, concurrency, per_block(concurrency, total))
                tallies[label].rates.setdefault(concurrency, []).append(elapsed)
    report: dict[str, dict[str, float]] = {}
    for label, tally in tallies.items():
        measured = len(tally.suspend)
        report[label] = {
            "suspend_p50": statistics.median(tally.suspend),
            "suspend_p95": pct(tally.suspend, 95),
            "resume_p50": statistics.median(tally.resume),
            "resume_p95": pct(tally.resume, 95),
            "answer_p50": statistics.median(tally.answer),
            "answer_p95": pct(tally.answer, 95),
            "cpu_ms_per_round_trip": tally.cpu * 1000 / measured,
            "pg_cpu_ms_per_round_trip": tally.pg_cpu * 1000 / measured,
            "total_cpu_ms_per_round_trip": (tally.cpu + tally.pg_cpu) * 1000 / measured,
            "statements_per_round_trip": tally.statements / measured,
            "pg_xacts_per_round_trip": await xacts_per_round_trip(kinds[label], rt, url),
        }
        for concurrency, times in tally.rates.items():
            count = per_block(concurrency, total) * len(times)
            report[label][f"sessions_per_s_c{concurrency}"] = count / sum(times)
    backends.conn.close()
    return report


async def xacts_per_round_trip(
    fn: Any, rt: AgentRuntime, url: str, n: int = XACTS_ROUND_TRIPS
) -> float:
    """Postgres transactions per round trip of ``fn`` (``n`` alone, the counters given time to
    be reported: a backend reports them at most about once a second)."""
    await asyncio.sleep(1.5)
    x0 = xacts(url)
    for _ in range(n):
        await fn(rt)
    await asyncio.sleep(1.5)
    return (xacts(url) - x0) / n


async def throughput(fn: Any, rt: AgentRuntime, concurrency: int, total: int) -> float:
    """The seconds ``total`` round trips take with ``concurrency`` clients."""
    queue = list(range(total))

    async def worker() -> None:
        while queue:
            queue.pop()
            await fn(rt)

    t0 = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    return time.perf_counter() - t0


async def parked_rss(kind: str, rt: AgentRuntime, n: int, trace: bool) -> dict[str, Any]:
    """Park ``n`` sessions (16 starting at a time) and keep them parked: RSS per parked session,
    threads before and after. A ``helix_hibernated`` session is parked once its turn has
    hibernated (its workflow ended)."""
    global _timing_answers
    _timing_answers = False
    _answered.clear()
    gc.collect()
    threads0 = os_threads()
    if trace:
        tracemalloc.start(1)
        snap0 = tracemalloc.take_snapshot()
    before = rss_kib()
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with sem:
            if kind == "helix":
                handle = await rt.start(AGENT.name, "go")
                await wait_in(cast(ParkedSet, rt.ctx.parked), handle.workflow_id or "")
            elif kind == "helix_hibernated":
                await hibernate(rt)
            else:
                wid = f"rawpark-{uuid.uuid4().hex}"
                with SetWorkflowID(wid):
                    await DBOS.start_workflow_async(raw_turn, 10**9 + i)
                await wait_in(_raw_parked, wid)

    t0 = time.perf_counter()
    await asyncio.gather(*[one(i) for i in range(n)])
    elapsed = time.perf_counter() - t0
    gc.collect()
    figures: dict[str, Any] = {
        "rss_kib_per_parked": (rss_kib() - before) / n,
        "threads_before_parking": threads0,
        "threads_parked": os_threads(),
        "python_threads_parked": threading.active_count(),
        "parked_per_s": n / elapsed,
    }
    if trace:
        snap1 = tracemalloc.take_snapshot()
        tracemalloc.stop()
        stats = snap1.compare_to(snap0, "filename")
        total = sum(s.size_diff for s in stats)
        print(f"{kind}: tracemalloc {total / n / 1024:.2f} KiB per parked session", flush=True)
        for stat in stats[:15]:
            name = stat.traceback[0].filename
            short = "/".join(name.split("/")[-3:])
            print(f"  {stat.size_diff / n:9.0f} B  {stat.count_diff / n:6.2f} blocks  {short}")
    return figures


#: Each round-trip kind, by the label its figures carry.
ROUND_TRIPS: dict[str, Callable[[AgentRuntime], Awaitable[tuple[float, float, float]]]] = {
    "raw_dbos": raw_round_trip,
    "helix": helix_round_trip,
    "helix_hibernated": hibernated_round_trip,
}
#: The helix kinds each ``--only`` measures (beside raw DBOS, always measured as the baseline).
SELECTIONS = {
    "all": ("helix", "helix_hibernated"),
    "round-trip": ("helix", "helix_hibernated"),
    "hot": ("helix",),
    "hibernated": ("helix_hibernated",),
    "parked": ("helix", "helix_hibernated"),
}
#: The ratios reported when both kinds were measured: name, kind, over which kind.
RATIOS = (
    ("ratios_helix_over_raw", "helix", "raw_dbos"),
    ("ratios_follow_up_over_raw", "helix_follow_up", "raw_dbos"),
    ("ratios_hibernated_over_raw", "helix_hibernated", "raw_dbos"),
    ("ratios_hibernated_over_helix", "helix_hibernated", "helix"),
)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--throughput", type=int, default=200)
    parser.add_argument("--parked", type=int, default=1000)
    parser.add_argument(
        "--only",
        choices=tuple(SELECTIONS),
        default="all",
        help="parked: only the parked-memory figures; round-trip: all but them; hot, "
        "hibernated: only the round trips of that helix kind (and raw DBOS's)",
    )
    parser.add_argument(
        "--follow-ups",
        action="store_true",
        help="also measure the round trip of a session's second message (helix_follow_up)",
    )
    parser.add_argument(
        "--trace-files",
        action="store_true",
        help="also print tracemalloc bytes per parked session by source file",
    )
    return parser.parse_args()


async def measure(rt: AgentRuntime, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure ``args`` ask for, by kind, and the ratios between kinds."""
    selected = ("raw_dbos", *SELECTIONS[args.only])
    report: dict[str, Any] = {label: {} for label in (*selected, "helix_follow_up")}
    if args.only != "parked":
        kinds = {label: ROUND_TRIPS[label] for label in selected}
        if args.follow_ups:
            # One ended session per follow-up round trip.
            await end_sessions(rt, round_trips_per_kind(args.iterations, args.throughput))
            kinds["helix_follow_up"] = follow_up_round_trip
        measured = await interleaved(kinds, rt, url, args.iterations, args.throughput)
        for label, figures in measured.items():
            report[label].update(figures)
    else:
        # A few warm-up round trips each, so that first-use allocations (imports, pools,
        # compiled statements) are not counted as the parked sessions' memory.
        for label in selected:
            for _ in range(10):
                await ROUND_TRIPS[label](rt)
    if args.only in ("all", "parked"):
        # DBOS's thread pool grows with load up to its bound, whatever parks: grow it
        # first, so that its threads are not counted as the parked sessions' memory (the
        # threads figures show that parking adds none).
        for label in selected:
            await asyncio.gather(*[ROUND_TRIPS[label](rt) for _ in range(64)])
        for label in selected:
            report[label].update(await parked_rss(label, rt, args.parked, args.trace_files))
    for name, kind, over in RATIOS:
        if report.get(kind) and report.get(over):
            report[name] = {
                k: report[kind][k] / report[over][k] for k in report[kind] if report[over].get(k)
            }
    return {label: figures for label, figures in report.items() if figures}


async def main() -> None:
    args = arguments()
    name = f"helix_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = ADMIN.rpartition("/")[0] + "/" + name
    # The deadline keeper runs as shipped (one read a second: no round trip's cost).
    rt = AgentRuntime(
        [AGENT, HIBERNATING],
        HelixSettings(database_url=url, executor_id="bench", application_version="bench"),
    )
    record_continuations()
    await rt.launch()
    check_windows()
    watch_parked(rt)
    try:
        report = await measure(rt, url, args)
    finally:
        await rt.shutdown()
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(json.dumps(report, indent=2, default=lambda v: round(v, 2)))
    for label, values in report.items():
        print(label, {k: round(v, 2) for k, v in values.items()})


if __name__ == "__main__":
    asyncio.run(main())
    # DBOS's threads of the destroyed runtime retry their dropped database for minutes; the
    # figures are printed, nothing is left to do.
    sys.stdout.flush()
    os._exit(0)
