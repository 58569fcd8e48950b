"""``helix-dbos prune``: delete ended sessions (and DBOS's records of their workflows) older
than a retention, and the decision record's rows older than its own, as the runtime's
retention sweeper does (``store/retention.py``)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .command import EXIT_OK, Command, CommandError
from .operator import add_database_options, print_json, with_operator

if TYPE_CHECKING:
    from ..runtime import Operator

__all__ = ["PRUNE"]


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than",
        metavar="DURATION",
        help="delete ended session trees last written longer ago than this (30d, 12h, 90m, "
        "45s, or seconds)",
    )
    parser.add_argument(
        "--decisions-older-than",
        metavar="DURATION",
        help="delete the approval decisions made longer ago than this, except those whose "
        "approval still waits (default: HELIX_DECISION_RETENTION_DAYS; unset: none)",
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
    from ..store.retention import Retention, sweep

    seconds = _duration("--older-than", args.older_than)
    decisions = _duration("--decisions-older-than", args.decisions_older_than)
    if args.batch < 1:
        raise CommandError("--batch must be at least 1")
    if args.agent and seconds is None:
        raise CommandError("--agent needs --older-than")
    retention = (
        Retention(None, dict.fromkeys(args.agent, seconds), frozenset(args.persistent))
        if args.agent
        else Retention(seconds, {}, frozenset(args.persistent))
    )

    async def work(operator: Operator) -> Any:
        days = operator.settings.decision_retention_days
        kept = decisions if decisions is not None else None if days is None else days * 86_400
        if seconds is None and kept is None:
            raise CommandError(
                "give --older-than (sessions), --decisions-older-than, or set "
                "HELIX_DECISION_RETENTION_DAYS"
            )
        schema = str(operator.settings.extra_dbos_config.get("dbos_system_schema", "dbos"))
        return await sweep(
            operator.store,
            replace(retention, decisions=kept),
            batch=args.batch,
            dry_run=args.dry_run,
            dbos_schema=schema,
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
                "decisions": done.decisions,
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
    if done.decisions:
        print(f"{verb} {done.decisions} approval decisions past their retention")
    return EXIT_OK


def _duration(option: str, text: str | None) -> float | None:
    from ..config import parse_duration

    if text is None:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise CommandError(f"{option}: {exc}") from None
    if seconds is None:
        raise CommandError(f"{option}: give a duration (30d, 12h, ...), not never")
    return seconds


PRUNE = Command(
    name="prune",
    help="delete ended sessions older than a retention, with their rows and DBOS's records",
    configure=_configure,
    run=_run,
)
