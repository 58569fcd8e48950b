"""``helix-dbos approvals --decided`` and ``approvals approve|deny ID``: the decision record
and the operator's answer on the command line.

``--decided`` lists ``__agents_approval_decisions`` (what ``GET /approvals/decisions`` lists,
every tenant included), newest first; ``--purge-decided`` deletes the decisions older than the
record's retention (``--older-than``, else ``HELIX_DECISION_RETENTION_DAYS``). ``approve`` and
``deny`` answer a pending approval through the runtime's submit path, as the principal ``--as``
names (default ``operator:<login>``) with the operator's credential, ``operator_cli``: the
approval's policy holds (four eyes, its quorum), and the record names the operator.
"""

from __future__ import annotations

import argparse
import getpass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .command import EXIT_OK, CommandError
from .operator import print_json, with_operator

if TYPE_CHECKING:
    from ..runtime import Operator
    from ..store.decisions import DecisionPage

__all__ = ["add_decision_options", "render_decisions", "run_answer", "run_decided"]

ACTIONS = ("approve", "deny")


def add_decision_options(parser: argparse.ArgumentParser) -> None:
    """The options of the record and of the operator's answer."""
    parser.add_argument(
        "action", nargs="?", choices=ACTIONS, help="answer a pending approval (approve or deny)"
    )
    parser.add_argument("approval", nargs="?", metavar="ID", help="the approval's approvalId")
    parser.add_argument("--reason", help="approve/deny: the reason on record (a denial's too)")
    parser.add_argument(
        "--as",
        dest="as_principal",
        metavar="PRINCIPAL",
        help="approve/deny: the principal on record (default: operator:<your login>)",
    )
    parser.add_argument(
        "--decided", action="store_true", help="list the decision record, newest first"
    )
    parser.add_argument("--decided-by", metavar="PRINCIPAL", help="--decided: by this decider")
    parser.add_argument(
        "--outcome", choices=("approved", "edited", "denied", "expired"), help="--decided"
    )
    parser.add_argument("--approval", dest="approval_filter", metavar="ID", help="--decided")
    parser.add_argument(
        "--since", metavar="TIME", help="--decided: at or after TIME (epoch ms or ISO-8601)"
    )
    parser.add_argument(
        "--purge-decided",
        action="store_true",
        help="delete the decisions older than --older-than (else HELIX_DECISION_RETENTION_DAYS)",
    )


def run_answer(args: argparse.Namespace) -> int:
    """``approvals approve|deny ID``."""
    from ..core.clock import now_ms
    from ..store.approvals import find_approval

    if args.approval is None:
        raise CommandError(f"{args.action} needs the approval's ID (its approvalId)")
    principal = args.as_principal or f"operator:{getpass.getuser()}"
    approved = args.action == "approve"

    async def work(operator: Operator) -> tuple[str, Any]:
        found = await find_approval(operator.store, args.approval, now_ms())
        if found is None:
            raise CommandError(f"no pending approval {args.approval!r} (answered, lapsed or gone)")
        answer = await operator.answer_approval(
            found.root_session_id,
            found.tool_call_id,
            found.approval_id,
            approved=approved,
            reason=args.reason,
            principal=principal,
        )
        return found.root_session_id, answer

    root, answer = with_operator(args, work)
    if args.json:
        print_json({"sessionId": root, **answer.dump(), "decidedBy": principal})
        return EXIT_OK
    if answer.status != "accepted":
        raise CommandError(f"{args.approval} was not answered: {answer.status}")
    kind = answer.continuation.kind if answer.continuation else ""
    done = "approved" if approved else "denied"
    if kind == "awaiting_quorum":
        print(f"{done} {args.approval} as {principal}: counted; its quorum waits for more")
    else:
        print(f"{done} {args.approval} in {root} as {principal}")
    return EXIT_OK


def run_decided(args: argparse.Namespace, since: int | None, older_than: float | None) -> int:
    """``approvals --decided`` (and ``--purge-decided``: ``older_than``, seconds, is its
    retention when given)."""
    from ..store.decisions import DecisionQuery, list_decisions, purge_decisions

    if args.purge_decided:
        return _purge(args, purge_decisions, older_than)
    query = DecisionQuery(
        tool=args.tool,
        session_id=args.session,
        approval_id=args.approval_filter,
        principal=args.decided_by,
        owner_principal=args.principal,
        owner_tenant=args.tenant,
        outcome=args.outcome,
        since=since,
        limit=args.limit,
        cursor=args.cursor,
    )

    async def work(operator: Operator) -> DecisionPage:
        return await list_decisions(operator.store, query)

    page = with_operator(args, work)
    if args.json:
        print_json(page.dump())
    else:
        print(render_decisions(page))
    return EXIT_OK


def _purge(args: argparse.Namespace, purge: Any, older_than: float | None) -> int:
    from ..core.clock import now_ms

    async def work(operator: Operator) -> tuple[int, float]:
        days = operator.settings.decision_retention_days
        if older_than is not None:
            seconds = older_than
        elif days is not None:
            seconds = days * 86400
        else:
            raise CommandError("give --older-than, or set HELIX_DECISION_RETENTION_DAYS")
        return await purge(operator.store, now_ms() - round(seconds * 1000)), seconds

    deleted, seconds = with_operator(args, work)
    if args.json:
        print_json({"deleted": deleted, "olderThanSeconds": seconds})
    else:
        print(f"deleted {deleted} decisions older than {seconds / 86400:g} days")
    return EXIT_OK


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def render_decisions(page: DecisionPage) -> str:
    """The page as a table, newest first, with how to get the next page."""
    if not page.decisions:
        return "no decisions"
    header = ("DECIDED (UTC)", "OUTCOME", "QUORUM", "TOOL", "APPROVAL", "BY", "CREDENTIAL")
    rows: list[tuple[str, ...]] = [header]
    for d in page.decisions:
        quorum = f"{d.votes} of {d.quorum}" if d.votes is not None and d.quorum else "-"
        rows.append(
            (
                _when(d.decided_at),
                d.outcome + ("" if d.final else " (counted)"),
                quorum,
                d.tool_name,
                d.approval_id,
                d.principal or "-",
                d.credential,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if page.next_cursor is not None:
        lines.append(f"more: --decided --cursor {page.next_cursor}")
    return "\n".join(lines)
