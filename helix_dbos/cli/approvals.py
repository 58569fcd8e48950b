"""``helix-dbos approvals``: the approval inbox on the command line.

It lists what ``GET /approvals`` and ``AgentRuntime.approvals`` list (the pending approvals
across sessions, oldest first, a page at a time) from the database directly, through an
``Operator``: no server, no authenticate hook, so it sees every tenant's approvals. Answer one
with ``POST /submit-tool-result`` on its root session (or ``runtime.submit_tool_result``), or
here: ``helix-dbos approvals approve|deny ID`` (``decisions.py``, with ``--decided``, the
decision record).
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..inspect.times import span
from .command import EXIT_OK, Command, CommandError
from .decisions import add_decision_options, run_answer, run_decided
from .operator import add_database_options, print_json, with_operator

if TYPE_CHECKING:
    from ..runtime import Operator
    from ..store.approvals import ApprovalPage

__all__ = ["APPROVALS", "parse_duration", "parse_instant", "render_approvals"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(?P<n>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h|d)?")


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``15m``, ``2h``, ``1d`` or ``500ms``.

    Raises:
        CommandError: not such a duration.
    """
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise CommandError(f"not a duration: {text!r} (say 90s, 15m, 2h or 1d)")
    return float(match["n"]) * _UNITS[match["unit"] or "s"]


def parse_instant(text: str) -> int:
    """Epoch milliseconds from epoch milliseconds or an ISO-8601 time (UTC unless it says).

    Raises:
        CommandError: neither.
    """
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(
            f"not a time: {text!r} (epoch milliseconds or ISO-8601, e.g. 2025-01-31T17:00)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tool", help="only approvals of this tool")
    parser.add_argument(
        "--session", metavar="SESSION", help="only this session's approvals (or its tree's)"
    )
    parser.add_argument("--principal", help="only sessions started by this principal")
    parser.add_argument("--tenant", help="only sessions of this tenant")
    parser.add_argument(
        "--older-than", metavar="DURATION", help="only approvals waiting at least this long (15m)"
    )
    parser.add_argument(
        "--deadline-before",
        metavar="TIME",
        help="only approvals expiring before TIME (epoch ms or ISO-8601)",
    )
    parser.add_argument(
        "--deadline-within",
        metavar="DURATION",
        help="only approvals expiring within this long from now (1h)",
    )
    parser.add_argument(
        "--limit", type=int, default=50, metavar="N", help="at most N (default: 50, max 500)"
    )
    parser.add_argument("--cursor", help="the next page (printed under a full page)")
    add_decision_options(parser)
    add_database_options(parser)


def _run(args: argparse.Namespace) -> int:
    from ..core.clock import now_ms
    from ..store.approvals import ApprovalQuery, list_approvals

    if args.action is not None:
        return run_answer(args)
    if args.decided or args.purge_decided:
        since = parse_instant(args.since) if args.since else None
        older = parse_duration(args.older_than) if args.older_than is not None else None
        return run_decided(args, since, older)
    if args.deadline_before is not None and args.deadline_within is not None:
        raise CommandError("give --deadline-before or --deadline-within, not both")
    older = parse_duration(args.older_than) if args.older_than is not None else None
    before = parse_instant(args.deadline_before) if args.deadline_before is not None else None
    if args.deadline_within is not None:
        before = now_ms() + round(parse_duration(args.deadline_within) * 1000)
    query = ApprovalQuery(
        tool=args.tool,
        session_id=args.session,
        principal=args.principal,
        tenant=args.tenant,
        older_than_ms=None if older is None else round(older * 1000),
        deadline_before=before,
        limit=args.limit,
        cursor=args.cursor,
    )

    async def work(operator: Operator) -> ApprovalPage:
        return await list_approvals(operator.store, query, now_ms())

    page = with_operator(args, work)
    if args.json:
        print_json(page.dump())
    else:
        print(render_approvals(page))
    return EXIT_OK


def render_approvals(page: ApprovalPage) -> str:
    """The page as a table, oldest first, with how to get the next page."""
    if not page.approvals:
        return "no pending approvals"
    header = (
        "APPROVAL",
        "TOOL",
        "SESSION",
        "PRINCIPAL",
        "TENANT",
        "WAITING",
        "EXPIRES IN",
        "QUORUM",
    )
    rows: list[tuple[str, ...]] = [header]
    for a in page.approvals:
        rows.append(
            (
                a.approval_id,
                a.tool_name,
                a.root_session_id,
                a.principal or "-",
                a.tenant or "-",
                span(a.age_ms / 1000),
                span((a.deadline_at - a.created_at - a.age_ms) / 1000),
                a.quorum["text"] if a.quorum and a.quorum["needed"] > 1 else "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if page.next_cursor is not None:
        lines.append(f"more: --cursor {page.next_cursor}")
    return "\n".join(lines)


APPROVALS = Command(
    name="approvals",
    help="list the approvals waiting for a human (or --decided, the decision record); "
    "approve or deny one",
    configure=_configure,
    run=_run,
)
