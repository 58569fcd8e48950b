"""Benchmark: what ``pool_pre_ping`` costs the session store per connection checkout.

The store's engine can recover from dead pooled connections (a restarted database, terminated
backends) by pinging each connection as it is checked out. The ping is one extra round trip
per checkout; this measures it on the store's real read path (``SessionStore.get`` on an
autocommit connection, the cheapest and most frequent operation) and on a write
(``SessionStore.update`` in its own transaction), with and without the ping, in one run.

    .venv/bin/python bench/pool_pre_ping.py [--iterations 2000] [--concurrency 16]

It creates and drops its own database on the local Postgres (HELIX_TEST_PG_URL, an admin URL).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import psycopg
from sqlalchemy.ext.asyncio import create_async_engine

from helix_dbos.config import parse_database_url
from helix_dbos.core.session import SessionState
from helix_dbos.store.migrate import upgrade
from helix_dbos.store.store import SessionStore

ADMIN = os.environ.get("HELIX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _store(url: str, pre_ping: bool) -> SessionStore:
    # The engine SessionStore.from_url builds for Postgres, with the ping switched on or off.
    engine = create_async_engine(
        parse_database_url(url).async_,
        pool_size=10,
        max_overflow=10,
        pool_recycle=1800,
        pool_pre_ping=pre_ping,
    )
    return SessionStore(engine)


async def _timed(op: Callable[[int], Awaitable[object]], n: int, concurrency: int) -> list[float]:
    samples: list[float] = []
    per_worker = n // concurrency

    async def worker(index: int) -> None:
        for _ in range(per_worker):
            began = time.perf_counter()
            await op(index)
            samples.append((time.perf_counter() - began) * 1000)

    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return samples


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(url: str, iterations: int, concurrency: int) -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    for pre_ping in (False, True, False, True):  # interleaved: drift hits both alike
        store = _store(url, pre_ping)
        # One session per worker: concurrent updates of one row would measure CAS retries.
        sids = [f"bench-{uuid.uuid4().hex[:8]}" for _ in range(concurrency)]
        for sid in sids:
            await store.create_session(
                SessionState(session_id=sid, agent_type="bench", root_session_id=sid)
            )

        async def read(i: int, store: SessionStore = store, sids: list[str] = sids) -> object:
            return await store.get(sids[i])

        async def write(i: int, store: SessionStore = store, sids: list[str] = sids) -> object:
            return await store.update([sids[i]], lambda states: None)

        for label, op in (("read", read), ("update", write)):
            for c in (1, concurrency):
                await _timed(op, 50, 1)  # warm the pool
                began = time.perf_counter()
                samples = await _timed(op, iterations, c)
                elapsed = time.perf_counter() - began
                key = f"{label} c{c} {'ping' if pre_ping else 'none'}"
                run = figures.setdefault(key, {"p50": 0.0, "p95": 0.0, "ops_per_s": 0.0})
                run["p50"] += statistics.median(samples) / 2
                run["p95"] += _pct(samples, 0.95) / 2
                run["ops_per_s"] += len(samples) / elapsed / 2
        await store.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    name = f"helix_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{ADMIN.rpartition('/')[0]}/{name}"
    try:
        upgrade(url)
        figures = asyncio.run(_measure(url, args.iterations, args.concurrency))
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"{'operation':<22} {'p50 ms':>8} {'p95 ms':>8} {'ops/s':>8}")
    for key, run in figures.items():
        print(f"{key:<22} {run['p50']:>8.2f} {run['p95']:>8.2f} {run['ops_per_s']:>8.0f}")


if __name__ == "__main__":
    main()
