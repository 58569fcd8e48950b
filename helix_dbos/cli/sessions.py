"""``helix-dbos sessions``, ``inspect`` and ``checkpoints``: reading sessions.

The read model and its text are ``helix_dbos.inspect``; the checkpoints come from
``runtime.lifecycle`` (the points a rewind or retry can use, docs/lifecycle.md).
"""

from __future__ import annotations

import argparse
import shutil
from typing import TYPE_CHECKING, Any

from .command import EXIT_OK, Command, CommandError
from .operator import add_database_options, print_json, with_operator

if TYPE_CHECKING:
    from ..runtime import Operator

__all__ = ["CHECKPOINTS", "INSPECT", "SESSIONS", "SESSION_STATUSES"]

#: The values of ``core.session.SessionStatus`` (spelled here: the CLI's top level imports no
#: pydantic); ``--status`` refuses any other (exit 2).
SESSION_STATUSES = (
    "idle",
    "running",
    "suspended_client_tool",
    "completed",
    "failed",
    "interrupted",
)


def _configure_sessions(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--status",
        choices=SESSION_STATUSES,
        metavar="STATUS",
        help=f"only sessions with this status: {', '.join(SESSION_STATUSES)}",
    )
    parser.add_argument("--agent", help="only sessions of this agent type")
    parser.add_argument(
        "--limit",
        type=int,
        default=20,
        metavar="N",
        help="at most N sessions, newest first (default: 20)",
    )
    add_database_options(parser)


def _run_sessions(args: argparse.Namespace) -> int:
    from ..inspect import list_sessions, render_sessions

    if args.limit < 1:
        raise CommandError("--limit must be at least 1")

    async def work(operator: Operator) -> Any:
        return await list_sessions(
            operator, status=args.status, agent_type=args.agent, limit=args.limit
        )

    rows = with_operator(args, work)
    if args.json:
        print_json([r.dump() for r in rows])
    else:
        print(render_sessions(rows))
    return EXIT_OK


def _configure_inspect(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", metavar="SESSION", help="the session id")
    parser.add_argument(
        "--messages",
        type=int,
        default=10,
        metavar="N",
        help="show the last N messages (default: 10)",
    )
    add_database_options(parser)


def _run_inspect(args: argparse.Namespace) -> int:
    from ..inspect import inspect_session, render_report

    async def work(operator: Operator) -> Any:
        return await inspect_session(operator, args.session, messages=args.messages)

    report = with_operator(args, work)
    if args.json:
        print_json(report.dump())
    else:
        print(render_report(report))
    return EXIT_OK


def _configure_checkpoints(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", metavar="SESSION", help="the session id")
    add_database_options(parser)


def _run_checkpoints(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Any:
        return await operator.checkpoints(args.session)

    rows = with_operator(args, work)
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        print(f"{args.session} has no checkpoints")
        return EXIT_OK
    print(render_checkpoints(rows, shutil.get_terminal_size().columns))
    return EXIT_OK


def render_checkpoints(rows: list[dict[str, Any]], width: int) -> str:
    """The checkpoints as a table whose last column is the id; where that table is wider than
    ``width`` (ids run to 110 characters), each row's id goes on its own line below it,
    indented, so the columns stay aligned and the id stays whole to copy."""
    header = ("CREATED (UTC)", "KIND", "RUN", "STEP", "MESSAGES")
    cells = [
        (_utc(r["createdAt"]), r["kind"], r["runId"] or "-", str(r["step"]), str(r["messageCount"]))
        for r in rows
    ]
    ids = [r["checkpointId"] for r in rows]
    wide = [(*header, "CHECKPOINT")] + [(*c, i) for c, i in zip(cells, ids, strict=True)]
    table = _columns(wide)
    if max(len(line) for line in table) <= width:
        return "\n".join(table)
    short = _columns([header, *cells])
    out = [short[0]]
    for line, checkpoint_id in zip(short[1:], ids, strict=True):
        out += [line, f"    {checkpoint_id}"]
    return "\n".join(out)


def _utc(created: str) -> str:
    """``2026-12-06T07:20:11.123+00:00`` (the JSON's UTC time) as ``2026-12-06 07:20:11``."""
    return created[:19].replace("T", " ") if created.endswith(("+00:00", "Z")) else created


def _columns(lines: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]


SESSIONS = Command(
    name="sessions",
    help="list recent sessions (newest first)",
    configure=_configure_sessions,
    run=_run_sessions,
)
INSPECT = Command(
    name="inspect",
    help="show one session: status, pending calls, ownership, tombstones, messages, "
    "its DBOS workflow (or since when its turn is hibernated) and its sub-agent tree",
    configure=_configure_inspect,
    run=_run_inspect,
)
CHECKPOINTS = Command(
    name="checkpoints",
    help="list a session's checkpoints, newest first (points a rewind or retry can use)",
    configure=_configure_checkpoints,
    run=_run_checkpoints,
)
