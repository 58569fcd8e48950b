"""The ``helix-dbos`` command line.

Every subcommand is one :class:`Command` in ``_commands``: a name, a one-line help, a function
that adds its options to an ``argparse`` parser, and a function that runs it and returns the
exit code. Adding one is a call to :func:`register` next to the others (keep heavy imports inside
the ``run`` function, so ``helix-dbos --help`` stays fast).

Exit codes: 0 success, 2 a usage, configuration or database problem (one line on stderr, never a
traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from . import __version__

if TYPE_CHECKING:
    from .runtime.operator import Operator

__all__ = ["EXIT_OK", "EXIT_USAGE", "Command", "CommandError", "build_parser", "main", "register"]

T = TypeVar("T")

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CommandError(Exception):
    """A failure the user can act on: printed as one line on stderr, exit code 2."""


@dataclass(frozen=True)
class Command:
    """One ``helix-dbos`` subcommand."""

    name: str
    """What the user types: ``helix-dbos <name>``."""
    help: str
    """One line for ``helix-dbos --help``."""
    configure: Callable[[argparse.ArgumentParser], None]
    """Adds the subcommand's options."""
    run: Callable[[argparse.Namespace], int]
    """Runs it; returns the exit code, or raises CommandError."""


_commands: dict[str, Command] = {}


def register(command: Command) -> Command:
    """Add a subcommand (a later registration of the same name replaces the earlier one)."""
    _commands[command.name] = command
    return command


def _database_url(explicit: str | None) -> str:
    """``--database-url``, else ``HELIX_DATABASE_URL``, else the embedded SQLite default."""
    if explicit:
        return explicit
    from_env = os.environ.get("HELIX_DATABASE_URL", "").strip()
    if from_env:
        return from_env
    from .config import HelixSettings

    return HelixSettings().database_url


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).strip().splitlines()[:1]).strip()
    return text or type(exc).__name__


# -- migrate --------------------------------------------------------------------------------


def _configure_migrate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="postgresql://... or sqlite:///path (default: $HELIX_DATABASE_URL, "
        "else sqlite:///helix.sqlite)",
    )
    parser.add_argument(
        "--revision", default="head", help="the revision to upgrade to (default: head)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _run_migrate(args: argparse.Namespace) -> int:
    # Imported here: SQLAlchemy and Alembic are not needed for `helix-dbos --help`.
    import sqlalchemy.exc
    from alembic.util import CommandError as AlembicCommandError

    from .config import parse_database_url, redact_url
    from .errors import HelixError
    from .store import migrate

    url = _database_url(args.database_url)
    shown = redact_url(url)
    try:
        parse_database_url(url)
        before = migrate.current_revision(url)
        after = migrate.upgrade(url, args.revision)
        head = migrate.head_revision()
    except HelixError as exc:
        raise CommandError(exc.message) from None
    except AlembicCommandError as exc:
        raise CommandError(f"cannot migrate {shown}: {_first_line(exc)}") from None
    except sqlalchemy.exc.DBAPIError as exc:
        detail = _first_line(exc.orig) if exc.orig is not None else _first_line(exc)
        if isinstance(exc, sqlalchemy.exc.OperationalError):
            raise CommandError(f"cannot connect to the database {shown}: {detail}") from None
        hint = ""
        if "permission denied" in detail.lower():
            hint = " (run the migration as a role that may create tables)"
        raise CommandError(f"the migration of {shown} failed: {detail}{hint}") from None
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise CommandError(f"cannot migrate {shown}: {_first_line(exc)}") from None

    if args.json:
        print(json.dumps({"revision": after, "previous": before, "head": head, "database": shown}))
    else:
        state = "head" if after == head else f"head is {head}"
        change = "unchanged" if before == after else f"was {before or 'empty'}"
        print(f"helix-dbos tables at revision {after} ({state}; {change}) in {shown}")
    return EXIT_OK


register(
    Command(
        name="migrate",
        help="create or upgrade the helix-dbos tables (run as a role that may run DDL)",
        configure=_configure_migrate,
        run=_run_migrate,
    )
)


# -- serve ----------------------------------------------------------------------------------


def _configure_serve(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="interface (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve without authentication when HELIX_AUTH_SECRET is not set "
        "(only behind a proxy that authenticates)",
    )


def _run_serve(args: argparse.Namespace) -> int:
    # Imported here: the web stack and DBOS are not needed for `helix-dbos --help`.
    import uvicorn

    from .errors import HelixError
    from .http.app import AUTH_SECRET_ENV, create_app

    if not os.environ.get(AUTH_SECRET_ENV) and not args.allow_unauthenticated:
        raise CommandError(
            f"set {AUTH_SECRET_ENV} (a random secret of 32+ bytes) to require session "
            "tokens, or pass --allow-unauthenticated behind an authenticating proxy"
        )
    try:
        app = create_app(allow_unauthenticated=args.allow_unauthenticated)
    except HelixError as exc:
        raise CommandError(exc.message) from None
    # An open event stream of a running turn would hold a graceful shutdown forever; after
    # the grace period it is closed (its client resumes with Last-Event-ID elsewhere).
    config = uvicorn.Config(app, host=args.host, port=args.port, timeout_graceful_shutdown=10)
    server = uvicorn.Server(config)
    server.run()
    if not server.started:
        raise CommandError("the server did not start (see the log above)")
    return EXIT_OK


register(
    Command(
        name="serve",
        help="run the agent server (the demo agents) over HTTP",
        configure=_configure_serve,
        run=_run_serve,
    )
)


# -- sessions, inspect, fail-call, interrupt -------------------------------------------------
#
# These open an ``Operator`` (``helix_dbos.runtime.operator``) on the database: it reads through
# the store and DBOS's public client, and it fails a call or interrupts a session through the
# runtime's own code with a ``dbos.DBOSClient`` as the messenger. It launches no DBOS, so the
# CLI never runs (or recovers) a workflow itself.


def _add_database_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="postgresql://... or sqlite:///path (default: $HELIX_DATABASE_URL, "
        "else sqlite:///helix.sqlite)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _with_operator(args: argparse.Namespace, work: Callable[[Operator], Awaitable[T]]) -> T:
    """Run ``work(operator)`` on an ``Operator`` opened on ``--database-url``.

    Every failure becomes one CommandError line: a bad URL, an unreachable database, tables
    that are missing or behind (naming ``helix-dbos migrate``), an unknown session.
    """
    import asyncio
    import logging

    import sqlalchemy.exc

    from .config import parse_database_url, redact_url
    from .errors import HelixError
    from .runtime.operator import Operator

    url = _database_url(args.database_url)
    shown = redact_url(url)

    async def run() -> T:
        async with Operator.open(url) as operator:
            return await work(operator)

    # The runtime's log events (a refused submit logs a warning) are not the CLI's output: with
    # no handler configured, logging's last resort would print them next to our one line.
    quiet = logging.NullHandler()
    logging.getLogger("helix_dbos").addHandler(quiet)
    try:
        urls = parse_database_url(url)
        if urls.is_sqlite and not os.path.exists(urls.sync.removeprefix("sqlite:///")):
            raise CommandError(f"no SQLite database at {shown}")
        return asyncio.run(run())
    except HelixError as exc:
        raise CommandError(exc.message) from None
    except sqlalchemy.exc.OperationalError as exc:
        detail = _first_line(exc.orig) if exc.orig is not None else _first_line(exc)
        raise CommandError(f"cannot use the database {shown}: {detail}") from None
    except sqlalchemy.exc.DBAPIError as exc:
        detail = _first_line(exc.orig) if exc.orig is not None else _first_line(exc)
        raise CommandError(f"the query on {shown} failed: {detail}") from None
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise CommandError(f"the query on {shown} failed: {_first_line(exc)}") from None
    except CommandError:
        raise
    except Exception as exc:  # one line, never a traceback (DBOS and driver errors included)
        raise CommandError(f"{type(exc).__name__}: {_first_line(exc)}") from None
    finally:
        logging.getLogger("helix_dbos").removeHandler(quiet)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def _configure_sessions(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--status", help="only sessions with this status (e.g. suspended_client_tool)"
    )
    parser.add_argument("--agent", help="only sessions of this agent type")
    parser.add_argument(
        "--limit",
        type=int,
        default=20,
        metavar="N",
        help="at most N sessions, newest first (default: 20)",
    )
    _add_database_options(parser)


def _run_sessions(args: argparse.Namespace) -> int:
    from .inspect import list_sessions, render_sessions

    if args.limit < 1:
        raise CommandError("--limit must be at least 1")

    async def work(operator: Operator) -> Any:
        return await list_sessions(
            operator, status=args.status, agent_type=args.agent, limit=args.limit
        )

    rows = _with_operator(args, work)
    if args.json:
        _print_json([r.dump() for r in rows])
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
    _add_database_options(parser)


def _run_inspect(args: argparse.Namespace) -> int:
    from .inspect import inspect_session, render_report

    async def work(operator: Operator) -> Any:
        return await inspect_session(operator, args.session, messages=args.messages)

    report = _with_operator(args, work)
    if args.json:
        _print_json(report.dump())
    else:
        print(render_report(report))
    return EXIT_OK


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
    _add_database_options(parser)


def _run_fail_call(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> tuple[str, Any]:
        return await operator.fail_call(args.session, args.tool_call, args.error)

    root, answer = _with_operator(args, work)
    if answer.status == "unknown_tool_call":
        why = f" ({answer.reason})" if answer.reason else ""
        raise CommandError(f"no pending call {args.tool_call!r} in session {root!r}{why}")
    if args.json:
        _print_json({"sessionId": root, **answer.dump()})
    elif answer.status == "accepted":
        print(f"failed {args.tool_call} in {root} with {args.error!r}: the turn continues")
    else:
        print(f"{args.tool_call} in {root} already had an answer; nothing changed")
    return EXIT_OK


def _configure_interrupt(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "session", metavar="SESSION", help="the session; its sub-agents are stopped with it"
    )
    _add_database_options(parser)


def _run_interrupt(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> tuple[str, Any]:
        return await operator.interrupt(args.session)

    before, state = _with_operator(args, work)
    if args.json:
        _print_json(
            {"sessionId": state.session_id, "status": state.status, "previousStatus": before}
        )
    elif state.status == before:
        print(f"{state.session_id} is {state.status}: nothing to interrupt")
    else:
        print(f"interrupted {state.session_id} (was {before})")
    return EXIT_OK


register(
    Command(
        name="sessions",
        help="list recent sessions (newest first)",
        configure=_configure_sessions,
        run=_run_sessions,
    )
)
register(
    Command(
        name="inspect",
        help="show one session: status, pending calls, ownership, tombstones, messages, "
        "its DBOS workflow and its sub-agent tree",
        configure=_configure_inspect,
        run=_run_inspect,
    )
)
register(
    Command(
        name="fail-call",
        help="fail a stuck client-tool call with an error, through the normal submit path",
        configure=_configure_fail_call,
        run=_run_fail_call,
    )
)
register(
    Command(
        name="interrupt",
        help="interrupt a session (and its sub-agents) from outside the runtime",
        configure=_configure_interrupt,
        run=_run_interrupt,
    )
)


# -- entry point ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The parser with one subparser per registered command."""
    parser = argparse.ArgumentParser(
        prog="helix-dbos",
        description="A Postgres-native durable agent runtime on DBOS Transact.",
    )
    parser.add_argument("--version", action="version", version=f"helix-dbos {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    for command in _commands.values():
        command.configure(sub.add_parser(command.name, help=command.help, description=command.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``helix-dbos`` with ``argv`` (default: the process arguments); return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    command = _commands[args.command]
    try:
        return command.run(args)
    except CommandError as exc:
        print(f"helix-dbos {command.name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
