"""What a ``helix-dbos`` subcommand is, the table of them, and the exit codes.

Every subcommand is one :class:`Command`: a name, a one-line help, a function that adds its
options to an ``argparse`` parser, and a function that runs it and returns the exit code.
:func:`register` adds one to the table the parser is built from.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Command",
    "CommandError",
    "commands",
    "first_line",
    "register",
]

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


#: The registered subcommands by name, in the order ``helix-dbos --help`` lists them.
commands: dict[str, Command] = {}


def register(command: Command) -> Command:
    """Add a subcommand (a later registration of the same name replaces the earlier one)."""
    commands[command.name] = command
    return command


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (its class name when it has none)."""
    text = " ".join(str(exc).strip().splitlines()[:1]).strip()
    return text or type(exc).__name__
