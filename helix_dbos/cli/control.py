"""``helix-dbos fail-call``, ``interrupt`` and ``heal``: acting on sessions from outside.

Each goes through the runtime's own code on an ``Operator``: a failed call is an answer
submitted the normal way, an interrupt is the runtime's stop, a repair is the reconciler's.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from .command import EXIT_OK, Command, CommandError
from .operator import add_database_options, print_json, with_operator

if TYPE_CHECKING:
    from ..runtime import Operator

__all__ = ["FAIL_CALL", "HEAL", "INTERRUPT"]


def _configure_fail_call(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "session",
        metavar="SESSION",
        help="the session (its root is used: submits always go to the root)",
    )
    parser.add_argument("tool_call", metavar="TOOL_CALL", help="the pending call's toolCallId")
    parser.add_argument(
        "--error",
        default="manually_failed_by_operator",  # Operator's FAIL_CALL_DEFAULT_ERROR
        help="the error the model reads (default: manually_failed_by_operator)",
    )
    add_database_options(parser)


def _run_fail_call(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> tuple[str, Any, int]:
        root, answer = await operator.fail_call(args.session, args.tool_call, args.error)
        # The answer is stored either way; whether the turn moves now depends on a process
        # running turns on this database (each heartbeats in the fleet table).
        fleet = await operator.executors()
        return root, answer, sum(1 for e in fleet if e.state == "live")

    root, answer, live = with_operator(args, work)
    if answer.status == "unknown_tool_call":
        why = f" ({answer.reason})" if answer.reason else ""
        raise CommandError(f"no pending call {args.tool_call!r} in session {root!r}{why}")
    if args.json:
        print_json({"sessionId": root, **answer.dump(), "liveExecutors": live})
    elif answer.status == "accepted" and live:
        print(f"failed {args.tool_call} in {root} with {args.error!r}: the turn continues")
    elif answer.status == "accepted":
        print(
            f"failed {args.tool_call} in {root} with {args.error!r}: no helix-dbos process is "
            "running on this database, so the turn continues once one is up (helix-dbos serve, "
            "or your application's runtime)"
        )
    else:
        print(f"{args.tool_call} in {root} already had an answer; nothing changed")
    return EXIT_OK


def _configure_interrupt(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "session", metavar="SESSION", help="the session; its sub-agents are stopped with it"
    )
    add_database_options(parser)


def _run_interrupt(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> tuple[str, Any]:
        return await operator.interrupt(args.session)

    before, state = with_operator(args, work)
    if args.json:
        print_json(
            {"sessionId": state.session_id, "status": state.status, "previousStatus": before}
        )
    elif state.status == before:
        print(f"{state.session_id} is {state.status}: nothing to interrupt")
    else:
        print(f"interrupted {state.session_id} (was {before})")
    return EXIT_OK


def _configure_heal(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--grace",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="only sessions untouched for this long (default 15): a start in flight is not lost",
    )
    add_database_options(parser)


def _run_heal(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> list[Any]:
        return await operator.heal(args.grace)

    repairs = with_operator(args, work)
    if args.json:
        print_json([r.dump() for r in repairs])
    elif not repairs:
        print("nothing to repair")
    else:
        for r in repairs:
            print(f"{r.action:<16} {r.session_id}  (workflow {r.workflow_status or 'missing'})")
    return EXIT_OK


FAIL_CALL = Command(
    name="fail-call",
    help="fail a stuck client-tool call with an error, through the normal submit path",
    configure=_configure_fail_call,
    run=_run_fail_call,
)
INTERRUPT = Command(
    name="interrupt",
    help="interrupt a session (and its sub-agents) from outside the runtime",
    configure=_configure_interrupt,
    run=_run_interrupt,
)
HEAL = Command(
    name="heal",
    help="repair sessions whose status and workflow disagree (a turn lost to a crash, a "
    "stop that did not finish); each is repaired once",
    configure=_configure_heal,
    run=_run_heal,
)
