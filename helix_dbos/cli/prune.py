"""``helix-dbos prune``: delete ended sessions (and DBOS's records of their workflows) older
than a retention, as the runtime's retention sweeper does (``store/retention.py``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from .command import EXIT_OK, Command, CommandError
from .operator import add_database_options, print_json, with_operator

if TYPE_CHECKING:
    from ..runtime._facade.operator import Operator

__all__ = ["PRUNE"]


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than",
        metavar="DURATION",
        required=True,
        help="delete ended session trees last written longer ago than this (30d, 12h, 90m, "
        "45s, or seconds)",
    )
    parser.add_argument(
        "--agent",
        metavar="TYPE",
        action="append",
        help="only sessions of this agent type (repeatable; default: every agent type)",
    )
    parser.add_argument(
        "--persistent",
        metavar="TYPE",
        action="append",
        default=[],
        help="an agent type that is persistent: its sessions are never deleted (repeatable; "
        "a session of a persistent agent is also recognized by its rows)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="count what would be deleted; delete nothing"
    )
    parser.add_argument("--batch", type=int, default=50, help="session trees per transaction")
    add_database_options(parser)


def _run(args: argparse.Namespace) -> int:
    from ..config import parse_duration
    from ..store.retention import Retention, sweep

    try:
        seconds = parse_duration(args.older_than)
    except ValueError as exc:
        raise CommandError(f"--older-than: {exc}") from None
    if seconds is None:
        raise CommandError("--older-than: give a duration (30d, 12h, ...), not never")
    if args.batch < 1:
        raise CommandError("--batch must be at least 1")
    retention = (
        Retention(None, dict.fromkeys(args.agent, seconds), frozenset(args.persistent))
        if args.agent
        else Retention(seconds, {}, frozenset(args.persistent))
    )

    async def work(operator: Operator) -> Any:
        schema = str(operator.settings.extra_dbos_config.get("dbos_system_schema", "dbos"))
        return await sweep(
            operator.store, retention, batch=args.batch, dry_run=args.dry_run, dbos_schema=schema
        )

    done = with_operator(args, work)
    verb = "would delete" if args.dry_run else "deleted"
    if args.json:
        print_json(
            {
                "dryRun": args.dry_run,
                "trees": done.trees,
                "sessions": done.sessions,
                "keptTrees": done.kept_trees,
                "rows": done.rows,
            }
        )
        return EXIT_OK
    rows = ", ".join(f"{table} {n}" for table, n in done.rows.items() if n)
    print(
        f"{verb} {done.trees} ended session trees ({done.sessions} sessions); "
        f"kept {done.kept_trees} whose sessions must stay"
    )
    if rows:
        print(f"rows: {rows}")
    return EXIT_OK


PRUNE = Command(
    name="prune",
    help="delete ended sessions older than a retention, with their rows and DBOS's records",
    configure=_configure,
    run=_run,
)
