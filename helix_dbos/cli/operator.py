"""The commands that read or act on sessions run their work on an ``Operator``.

An ``Operator`` (``helix_dbos.runtime.Operator``) opened on the database reads through the store
and DBOS's public client, and it fails a call or interrupts a session through the runtime's own
code with a ``dbos.DBOSClient`` as the messenger. It launches no DBOS, so the CLI never runs (or
recovers) a workflow itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .command import CommandError, first_line

if TYPE_CHECKING:
    from ..runtime import Operator

__all__ = ["add_database_options", "print_json", "with_operator"]

T = TypeVar("T")


def add_database_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--database-url`` and ``--json``, the options every such command takes."""
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="postgresql://... or sqlite:///path (default: $HELIX_DATABASE_URL, "
        "else sqlite:///helix.sqlite, else the demo's sqlite:///demo.sqlite if only it exists)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def with_operator(args: argparse.Namespace, work: Callable[[Operator], Awaitable[T]]) -> T:
    """Run ``work(operator)`` on an ``Operator`` opened on ``--database-url``.

    Every failure becomes one CommandError line: a bad URL, an unreachable database, tables
    that are missing or behind (naming ``helix-dbos migrate``), an unknown session.
    """
    import asyncio
    import logging

    from ..config import redact_url
    from ..errors import HelixError
    from ..runtime import Operator
    from ..store.connection import DBAPIError, OperationalError, SQLAlchemyError
    from .database import choose_database, missing_sqlite_message, sqlite_path

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
        detail = first_line(exc.orig) if exc.orig is not None else first_line(exc)
        raise CommandError(f"cannot use the database {shown}: {detail}") from None
    except DBAPIError as exc:
        detail = first_line(exc.orig) if exc.orig is not None else first_line(exc)
        raise CommandError(f"the query on {shown} failed: {detail}") from None
    except SQLAlchemyError as exc:
        raise CommandError(f"the query on {shown} failed: {first_line(exc)}") from None
    except CommandError:
        raise
    except Exception as exc:  # one line, never a traceback (DBOS and driver errors included)
        raise CommandError(f"{type(exc).__name__}: {first_line(exc)}") from None
    finally:
        logging.getLogger("helix_dbos").removeHandler(quiet)


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON (a value JSON has no type for, a time, as its text)."""
    print(json.dumps(value, indent=2, default=str))
