"""The ``helix-dbos`` command line.

Every subcommand is one :class:`Command` (``command.py``): a name, a one-line help, a function
that adds its options to an ``argparse`` parser, and a function that runs it and returns the
exit code. The commands live in a module per group (``migrate``, ``serve``, ``executors``,
``sessions``, ``control``, ``approvals``) and are registered below, in the order
``helix-dbos --help`` lists them; adding one is a :func:`register` call (keep heavy imports
inside the ``run`` function, so ``helix-dbos --help`` stays fast).

Exit codes: 0 success, 2 a usage, configuration or database problem (one line on stderr, never a
traceback), 130 interrupted, 141 the reader of the output went away (``... | head``), quietly.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .. import __version__
from .approvals import APPROVALS
from .command import (
    EXIT_BROKEN_PIPE,
    EXIT_OK,
    EXIT_USAGE,
    Command,
    CommandError,
    commands,
    register,
)
from .command import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from .control import FAIL_CALL, HEAL, INTERRUPT
from .executors import EXECUTORS
from .migrate import MIGRATE
from .prune import PRUNE
from .serve import SERVE
from .serve import worker_app as worker_app
from .sessions import CHECKPOINTS, INSPECT, SESSIONS
from .tokens import APPROVER_TOKEN

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

#: The registered commands by name (``command.commands``).
_commands = commands

for _command in (
    MIGRATE,
    SERVE,
    EXECUTORS,
    SESSIONS,
    INSPECT,
    FAIL_CALL,
    INTERRUPT,
    HEAL,
    CHECKPOINTS,
    APPROVALS,
    APPROVER_TOKEN,
    PRUNE,
):
    register(_command)


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
