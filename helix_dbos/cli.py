"""The ``helix-dbos`` command line.

Every subcommand is one :class:`Command` in ``_commands``: a name, a one-line help, a function
that adds its options to an ``argparse`` parser, and a function that runs it and returns the
exit code. Adding one is a call to :func:`register` next to the others (keep heavy imports inside
the ``run`` function, so ``helix-dbos --help`` stays fast).

Exit codes: 0 success, 2 a usage, configuration or database problem (one line on stderr, never a
traceback), 130 interrupted, 141 the reader of the output went away (``... | head``), quietly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from . import __version__

if TYPE_CHECKING:
    import socket

    from .config import HelixSettings
    from .runtime.operator import Operator

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_OK",
    "EXIT_USAGE",
    "Command",
    "CommandError",
    "build_parser",
    "main",
    "register",
]

T = TypeVar("T")

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: 128 + SIGPIPE, what a shell tool killed by a closed pipe exits with.
EXIT_BROKEN_PIPE = 141


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


@contextmanager
def _database_errors(shown: str) -> Iterator[None]:
    """Turn a configuration, migration or database failure into one CommandError line."""
    # Imported here: SQLAlchemy and Alembic are not needed for `helix-dbos --help`.
    from .errors import HelixError
    from .store.connection import DBAPIError, OperationalError, SQLAlchemyError
    from .store.migrate import MigrationCommandError

    try:
        yield
    except HelixError as exc:
        raise CommandError(exc.message) from None
    except MigrationCommandError as exc:
        raise CommandError(f"cannot migrate {shown}: {_first_line(exc)}") from None
    except DBAPIError as exc:
        detail = _first_line(exc.orig) if exc.orig is not None else _first_line(exc)
        if isinstance(exc, OperationalError):
            raise CommandError(f"cannot connect to the database {shown}: {detail}") from None
        hint = ""
        if "permission denied" in detail.lower():
            hint = " (run the migration as a role that may create tables)"
        raise CommandError(f"the migration of {shown} failed: {detail}{hint}") from None
    except SQLAlchemyError as exc:
        raise CommandError(f"cannot migrate {shown}: {_first_line(exc)}") from None


def _run_migrate(args: argparse.Namespace) -> int:
    from .config import parse_database_url, redact_url
    from .store import migrate

    url = _database_url(args.database_url)
    shown = redact_url(url)
    with _database_errors(shown):
        parse_database_url(url)
        before = migrate.current_revision(url)
        after = migrate.upgrade(url, args.revision)
        head = migrate.head_revision()

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
    parser.add_argument(
        "app",
        nargs="?",
        metavar="APP",
        help="module:attribute naming an Agent, a list of agents or an AgentRegistry, "
        "imported from the working directory (default: the demo agents, on the model "
        "HELIX_LLM names)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve without authentication when HELIX_AUTH_SECRET is not set "
        "(only behind a proxy that authenticates)",
    )
    parser.add_argument(
        "--chat-agent",
        metavar="NAME",
        help="the agent POST /chat runs (default: the first agent served)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="one line per log record: text (default) or JSON lines",
    )
    parser.add_argument(
        "--verbose-validation-errors",
        action="store_true",
        help="add validation details to 400 answers (they reveal the schemas: development)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="run N server processes on the port, each its own executor (default: 1)",
    )


#: Passes serve's options to the worker processes of ``serve --workers N`` (JSON).
_WORKER_OPTIONS_ENV = "HELIX_SERVE_WORKER_OPTIONS"


def worker_app() -> Any:
    """The app of one ``serve --workers N`` process (uvicorn imports and calls it)."""
    from .http.app import create_app
    from .loader import load_agents
    from .observability.logging_config import configure_logging

    options = json.loads(os.environ.get(_WORKER_OPTIONS_ENV) or "{}")
    configure_logging(options.get("logFormat", "text"))
    return create_app(
        agents=load_agents(options["app"]) if options.get("app") else None,
        allow_unauthenticated=bool(options.get("allowUnauthenticated")),
        verbose_validation_errors=bool(options.get("verboseValidationErrors")),
        chat_agent_type=options.get("chatAgent"),
    )


def _run_serve(args: argparse.Namespace) -> int:
    # Imported here: the web stack and DBOS are not needed for `helix-dbos --help`.
    from .config import HelixSettings
    from .errors import HelixError
    from .http.app import AUTH_SECRET_ENV
    from .http.listener import bind_listener
    from .loader import load_agents
    from .observability.logging_config import configure_logging

    if not os.environ.get(AUTH_SECRET_ENV) and not args.allow_unauthenticated:
        raise CommandError(
            f"set {AUTH_SECRET_ENV} (a random secret of 32+ bytes) to require session "
            "tokens, or pass --allow-unauthenticated behind an authenticating proxy"
        )
    if args.workers < 1:
        raise CommandError("--workers must be at least 1")
    if args.workers > 1 and os.environ.get("HELIX_EXECUTOR_ID"):
        raise CommandError(
            "HELIX_EXECUTOR_ID names one process; with --workers each worker generates "
            "its own executor id (unset it)"
        )
    try:
        configure_logging(args.log_format)
        settings = HelixSettings.from_env()
        agents = load_agents(args.app) if args.app else None
        # The port before the database: a port in use is one line (exit 2) here, before any
        # migration or launch, not uvicorn's exit 3 after the runtime has started.
        listener = bind_listener(args.host, args.port)
    except HelixError as exc:
        raise CommandError(exc.message) from None
    try:
        return _serve_on(listener, args, settings, agents)
    finally:
        listener.close()


def _serve_on(
    listener: socket.socket, args: argparse.Namespace, settings: HelixSettings, agents: Any
) -> int:
    """Check the database, then serve on ``listener`` (the socket ``serve`` bound)."""
    import uvicorn

    from .config import redact_url
    from .http.app import create_app
    from .http.listener import ListeningServer
    from .store import migrate

    # Check the database before the server starts, so a wrong URL, a missing database or
    # tables behind the code are one line here, not a traceback from the app's startup.
    with _database_errors(redact_url(settings.database_url)):
        if settings.run_migrations:
            migrate.upgrade(settings.database_url)
        else:
            migrate.require_current_schema(settings.database_url)
        if args.workers > 1:
            # Each worker process builds its own app (and runtime, and executor id) from the
            # same options, passed down in the environment.
            os.environ[_WORKER_OPTIONS_ENV] = json.dumps(
                {
                    "app": args.app,
                    "allowUnauthenticated": args.allow_unauthenticated,
                    "verboseValidationErrors": args.verbose_validation_errors,
                    "chatAgent": args.chat_agent,
                    "logFormat": args.log_format,
                }
            )
            # uvicorn binds the port itself for its workers: the check above was a probe.
            listener.close()
            uvicorn.run(
                "helix_dbos.cli:worker_app",
                factory=True,
                host=args.host,
                port=args.port,
                workers=args.workers,
                timeout_graceful_shutdown=10,
                log_config=None,
            )
            return EXIT_OK
        app = create_app(
            agents=agents,
            settings=settings,
            allow_unauthenticated=args.allow_unauthenticated,
            verbose_validation_errors=args.verbose_validation_errors,
            chat_agent_type=args.chat_agent,
        )
    # An open event stream of a running turn would hold a graceful shutdown forever; after
    # the grace period it is closed (its client resumes with Last-Event-ID elsewhere).
    # log_config=None: the logging configured above stays as it is.
    config = uvicorn.Config(
        app, host=args.host, port=args.port, timeout_graceful_shutdown=10, log_config=None
    )
    server = ListeningServer(config)
    try:
        server.run(sockets=[listener])
    except SystemExit as exc:
        # uvicorn exits 3 when the app's startup (the runtime's launch) failed: a startup
        # failure is exit 2, its cause is in the log above.
        if server.started or exc.code in (0, None):
            raise
    if not server.started:
        raise CommandError("the server did not start (see the log above)")
    return EXIT_OK


register(
    Command(
        name="serve",
        help="run the agent server over HTTP: your agents (APP) or the demo agents",
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
        "else sqlite:///helix.sqlite, else the demo's sqlite:///demo.sqlite if only it exists)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _with_operator(args: argparse.Namespace, work: Callable[[Operator], Awaitable[T]]) -> T:
    """Run ``work(operator)`` on an ``Operator`` opened on ``--database-url``.

    Every failure becomes one CommandError line: a bad URL, an unreachable database, tables
    that are missing or behind (naming ``helix-dbos migrate``), an unknown session.
    """
    import asyncio
    import logging

    from .cli_database import choose_database, missing_sqlite_message, sqlite_path
    from .config import redact_url
    from .errors import HelixError
    from .runtime.operator import Operator
    from .store.connection import DBAPIError, OperationalError, SQLAlchemyError

    chosen = choose_database(args.database_url)
    url = chosen.url
    shown = redact_url(url)

    async def run() -> T:
        async with Operator.open(url) as operator:
            return await work(operator)

    # The runtime's log events (a refused submit logs a warning) are not the CLI's output: with
    # no handler configured, logging's last resort would print them next to our one line.
    quiet = logging.NullHandler()
    logging.getLogger("helix_dbos").addHandler(quiet)
    try:
        path = sqlite_path(url)
        if path is not None and not os.path.exists(path):
            raise CommandError(missing_sqlite_message(chosen))
        if chosen.note:  # on stderr: stdout stays the output alone (--json)
            print(f"helix-dbos {getattr(args, 'command', '')}: {chosen.note}", file=sys.stderr)
        return asyncio.run(run())
    except HelixError as exc:
        raise CommandError(exc.message) from None
    except OperationalError as exc:
        detail = _first_line(exc.orig) if exc.orig is not None else _first_line(exc)
        raise CommandError(f"cannot use the database {shown}: {detail}") from None
    except DBAPIError as exc:
        detail = _first_line(exc.orig) if exc.orig is not None else _first_line(exc)
        raise CommandError(f"the query on {shown} failed: {detail}") from None
    except SQLAlchemyError as exc:
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
    from .runtime.fleet import list_executors

    async def work(operator: Operator) -> tuple[str, Any, int]:
        root, answer = await operator.fail_call(args.session, args.tool_call, args.error)
        # The answer is stored either way; whether the turn moves now depends on a process
        # running turns on this database (each heartbeats in the fleet table).
        fleet = await list_executors(operator.store, operator.settings.adopt_after_seconds)
        return root, answer, sum(1 for e in fleet if e.state == "live")

    root, answer, live = _with_operator(args, work)
    if answer.status == "unknown_tool_call":
        why = f" ({answer.reason})" if answer.reason else ""
        raise CommandError(f"no pending call {args.tool_call!r} in session {root!r}{why}")
    if args.json:
        _print_json({"sessionId": root, **answer.dump(), "liveExecutors": live})
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


def _configure_heal(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--grace",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="only sessions untouched for this long (default 15): a start in flight is not lost",
    )
    _add_database_options(parser)


def _configure_executors(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--all", action="store_true", help="also list stopped and adopted executors"
    )
    parser.add_argument(
        "--forward",
        metavar="VERSION",
        help="move the parked turns of application version VERSION (whose processes are "
        "gone) to this release's version, for the live fleet to adopt",
    )
    _add_database_options(parser)


def _run_heal(args: argparse.Namespace) -> int:
    async def work(operator: Operator) -> list[Any]:
        return await operator.heal(args.grace)

    repairs = _with_operator(args, work)
    if args.json:
        _print_json([r.dump() for r in repairs])
    elif not repairs:
        print("nothing to repair")
    else:
        for r in repairs:
            print(f"{r.action:<16} {r.session_id}  (workflow {r.workflow_status or 'missing'})")
    return EXIT_OK


def _run_executors(args: argparse.Namespace) -> int:
    from .runtime.fleet import forward_stranded, list_executors, pending_by_version

    async def work(operator: Operator) -> Any:
        settings, store = operator.settings, operator.store
        moved = None
        if args.forward:
            moved = await forward_stranded(
                store,
                args.forward,
                settings.application_version,
                f"cli-{settings.executor_id}",
                settings.adopt_after_seconds,
            )
        found = await list_executors(store, settings.adopt_after_seconds, include_gone=args.all)
        return settings, found, await pending_by_version(store), moved

    settings, found, versions, moved = _with_operator(args, work)
    if args.json:
        body: dict[str, Any] = {
            "applicationVersion": settings.application_version,
            "executors": [e.dump() for e in found],
            "pendingTurnsByVersion": versions,
        }
        if moved is not None:
            body["forwarded"] = moved
        _print_json(body)
        return EXIT_OK
    if moved is not None:
        print(
            f"moved {len(moved)} parked turns of {args.forward} to "
            f"{settings.application_version}; live executors of it adopt them"
        )
    from .inspect import render_executors

    print(render_executors(found, versions, settings.application_version))
    return EXIT_OK


register(
    Command(
        name="executors",
        help="list the fleet: live and dead executors, their parked turns, stranded versions",
        configure=_configure_executors,
        run=_run_executors,
    )
)


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
        "its DBOS workflow (or since when its turn is hibernated) and its sub-agent tree",
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


register(
    Command(
        name="heal",
        help="repair sessions whose status and workflow disagree (a turn lost to a crash, a "
        "stop that did not finish); each is repaired once",
        configure=_configure_heal,
        run=_run_heal,
    )
)


# -- checkpoints (docs/lifecycle.md) --------------------------------------------------------


def _configure_checkpoints(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", metavar="SESSION", help="the session id")
    _add_database_options(parser)


def _run_checkpoints(args: argparse.Namespace) -> int:
    from .runtime.lifecycle import checkpoints_of

    async def work(operator: Operator) -> Any:
        return await checkpoints_of(operator.store, args.session)

    rows = _with_operator(args, work)
    if args.json:
        _print_json(rows)
        return EXIT_OK
    if not rows:
        print(f"{args.session} has no checkpoints")
        return EXIT_OK
    header = ("CHECKPOINT", "KIND", "RUN", "STEP", "MESSAGES", "CREATED")
    lines = [header] + [
        (
            r["checkpointId"],
            r["kind"],
            r["runId"] or "-",
            str(r["step"]),
            str(r["messageCount"]),
            r["createdAt"],
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    return EXIT_OK


register(
    Command(
        name="checkpoints",
        help="list a session's checkpoints, newest first (points a rewind or retry can use)",
        configure=_configure_checkpoints,
        run=_run_checkpoints,
    )
)


# The approval inbox lives in its own module; importing it registers ``approvals``.
from . import cli_approvals  # noqa: E402, F401

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
        code = command.run(args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is noticed while we can answer it
        return code
    except CommandError as exc:
        print(f"helix-dbos {command.name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader left (`... --json | head`): nothing more to say to it, and no traceback.
        # What is still buffered goes to /dev/null, or the flush at exit would fail again.
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE


def _stdout_to_devnull() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # not a real file (captured in a test)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":
    # ``python -m helix_dbos.cli`` runs this file as ``__main__``; the commands registered by
    # other modules (``cli_approvals``) are in ``helix_dbos.cli``'s table: run that one.
    from helix_dbos.cli import main as _main

    sys.exit(_main())
