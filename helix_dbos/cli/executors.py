"""``helix-dbos executors``: the fleet on one database, and moving a stranded version forward."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from .command import EXIT_OK, Command
from .operator import add_database_options, print_json, with_operator

if TYPE_CHECKING:
    from ..runtime import Operator

__all__ = ["EXECUTORS"]


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--all", action="store_true", help="also list stopped and adopted executors"
    )
    parser.add_argument(
        "--forward",
        metavar="VERSION",
        help="move the parked turns of application version VERSION (whose processes are "
        "gone) to this release's version, for the live fleet to adopt",
    )
    add_database_options(parser)


def _run(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> Any:
        moved = None
        if args.forward:
            moved = await operator.forward_stranded(args.forward)
        found = await operator.executors(include_gone=args.all)
        return operator.settings, found, await operator.pending_by_version(), moved

    settings, found, versions, moved = with_operator(args, work)
    if args.json:
        body: dict[str, Any] = {
            "applicationVersion": settings.application_version,
            "executors": [e.dump() for e in found],
            "pendingTurnsByVersion": versions,
        }
        if moved is not None:
            body["forwarded"] = moved
        print_json(body)
        return EXIT_OK
    if moved is not None:
        print(
            f"moved {len(moved)} parked turns of {args.forward} to "
            f"{settings.application_version}; live executors of it adopt them"
        )
    from ..inspect import render_executors

    print(render_executors(found, versions, settings.application_version))
    return EXIT_OK


EXECUTORS = Command(
    name="executors",
    help="list the fleet: live and dead executors, their parked turns, stranded versions",
    configure=_configure,
    run=_run,
)
