"""The full chaos run: 200 sessions of the ``editor`` demo (a third with approvals) through
``helix-dbos serve`` on Postgres, with 40 SIGKILLs at random points (mid model call, mid
start, mid submit, mid interrupt) and restarts with the same identity.

    .venv/bin/python bench/chaos.py [--sessions 200] [--kills 40] [--concurrency 40] [--seed N]

It runs on a private Postgres cluster it creates in a temporary directory (``initdb`` and
``pg_ctl`` on a free port; as root, the server runs as the ``postgres`` user) and removes
afterwards. It prints the figures as JSON and exits 1 if any check failed: every session
ended (a session still going at its timeout is driven on for two more minutes, and counted
``late`` if it ends then), no duplicate tool result, every accepted answer applied, no session active without a
live workflow, no interrupted turn completed, no 500. The CI version of the same run is
``tests/chaos/test_chaos.py`` (30 sessions, 5 kills).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

# The scenario and its harness live with the tests (tests/chaos, tests/faults).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.chaos.chaos import run_chaos
from tests.faults.pgcluster import PrivateCluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--kills", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=40)
    parser.add_argument("--model-delay-ms", type=int, default=150)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--hot-window",
        type=float,
        default=None,
        help="the server's hot window in seconds (HELIX_HIBERNATE_AFTER_SECONDS)",
    )
    parser.add_argument(
        "--slow-answers",
        type=float,
        default=0.3,
        help="with --hot-window: the share of calls answered after 1-2.5 hot windows",
    )
    args = parser.parse_args()
    with PrivateCluster.create() as cluster, tempfile.TemporaryDirectory() as workdir:
        report = asyncio.run(
            run_chaos(
                cluster.create_database(),
                Path(workdir),
                sessions=args.sessions,
                kills=args.kills,
                concurrency=args.concurrency,
                model_delay_ms=args.model_delay_ms,
                session_timeout=180,
                seed=args.seed,
                hot_window=args.hot_window,
                slow_answer_share=args.slow_answers if args.hot_window is not None else 0.0,
            )
        )
    print(json.dumps(report.summary(), indent=1, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
