"""``helix-dbos migrate``: create or upgrade the tables; and a migration's failures as one line.

``serve`` migrates (or checks the schema) before it serves, with the same one-line failures
(:func:`database_errors`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from .command import EXIT_OK, Command, CommandError, first_line
from .database import choose_database

__all__ = ["MIGRATE", "database_errors", "database_url"]


def database_url(explicit: str | None, command: str = "migrate") -> str:
    """The database every command uses (``database.choose_database``): ``--database-url``,
    else ``HELIX_DATABASE_URL``, else ``helix.sqlite``, else the demo's ``demo.sqlite`` where
    only it exists (said on stderr)."""
    chosen = choose_database(explicit)
    if chosen.note:
        print(f"helix-dbos {command}: {chosen.note}", file=sys.stderr)
    return chosen.url


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="postgresql://... or sqlite:///path (default: $HELIX_DATABASE_URL, "
        "else sqlite:///helix.sqlite, else the demo's sqlite:///demo.sqlite if only it exists)",
    )
    parser.add_argument(
        "--revision", default="head", help="the revision to upgrade to (default: head)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


@contextmanager
def database_errors(shown: str) -> Iterator[None]:
    """Turn a configuration, migration or database failure into one CommandError line."""
    # Imported here: SQLAlchemy and Alembic are not needed for `helix-dbos --help`.
    from ..errors import HelixError
    from ..store.connection import DBAPIError, OperationalError, SQLAlchemyError
    from ..store.migrate import MigrationCommandError

    try:
        yield
    except HelixError as exc:
        raise CommandError(exc.message) from None
    except MigrationCommandError as exc:
        raise CommandError(f"cannot migrate {shown}: {first_line(exc)}") from None
    except DBAPIError as exc:
        detail = first_line(exc.orig) if exc.orig is not None else first_line(exc)
        if isinstance(exc, OperationalError):
            raise CommandError(f"cannot connect to the database {shown}: {detail}") from None
        hint = ""
        if "permission denied" in detail.lower():
            hint = " (run the migration as a role that may create tables)"
        raise CommandError(f"the migration of {shown} failed: {detail}{hint}") from None
    except SQLAlchemyError as exc:
        raise CommandError(f"cannot migrate {shown}: {first_line(exc)}") from None


def _run(args: argparse.Namespace) -> int:
    from ..config import parse_database_url, redact_url
    from ..store import migrate

    url = database_url(args.database_url)
    shown = redact_url(url)
    with database_errors(shown):
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


MIGRATE = Command(
    name="migrate",
    help="create or upgrade the helix-dbos tables (run as a role that may run DDL)",
    configure=_configure,
    run=_run,
)
