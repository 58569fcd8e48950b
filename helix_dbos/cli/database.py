"""Which database the ``helix-dbos`` commands that read sessions use, and why.

The URL comes from ``--database-url``, else ``HELIX_DATABASE_URL``, else the default
``sqlite:///helix.sqlite``. One more step for the default alone: when ``helix.sqlite`` does not
exist in the working directory but ``demo.sqlite`` does (where ``scripts/demo`` keeps the
demo's sessions), the commands read ``demo.sqlite`` and say so on stderr. A SQLite file that
does not exist is refused in one line that names the URL, the file looked for, where the URL
came from and how to point the command elsewhere.

Kept free of SQLAlchemy and DBOS, like the rest of the CLI's top level.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..config import DEFAULT_SQLITE_URL, parse_database_url, redact_url

__all__ = [
    "DATABASE_URL_ENV",
    "DEMO_SQLITE_URL",
    "ChosenDatabase",
    "choose_database",
    "missing_sqlite_message",
    "sqlite_path",
]

DATABASE_URL_ENV = "HELIX_DATABASE_URL"
#: Where ``scripts/demo`` keeps its sessions (relative to the directory it runs in).
DEMO_SQLITE_URL = "sqlite:///demo.sqlite"


@dataclass(frozen=True)
class ChosenDatabase:
    """A database URL and where it came from."""

    url: str
    source: str
    """``--database-url``, ``HELIX_DATABASE_URL``, ``default`` or ``demo`` (the default file
    was missing and the demo's file was there)."""

    @property
    def note(self) -> str | None:
        """The line to show on stderr when the URL is not the one the user would assume."""
        if self.source != "demo":
            return None
        return (
            f"using {self.url}, the demo's database (there is no {_file(DEFAULT_SQLITE_URL)} "
            f"here); choose another with --database-url or {DATABASE_URL_ENV}"
        )


def sqlite_path(url: str) -> str | None:
    """The file a SQLite URL names (relative to the working directory), else ``None``.

    Raises:
        ConfigError: not a supported database URL.
    """
    urls = parse_database_url(url)
    return urls.sync.removeprefix("sqlite:///") if urls.is_sqlite else None


def _file(url: str) -> str:
    return url.removeprefix("sqlite:///")


def choose_database(explicit: str | None) -> ChosenDatabase:
    """``--database-url``, else ``HELIX_DATABASE_URL``, else the default file, else (when only
    it exists in the working directory) the demo's file."""
    if explicit:
        return ChosenDatabase(explicit, "--database-url")
    from_env = os.environ.get(DATABASE_URL_ENV, "").strip()
    if from_env:
        return ChosenDatabase(from_env, DATABASE_URL_ENV)
    if not os.path.exists(_file(DEFAULT_SQLITE_URL)) and os.path.exists(_file(DEMO_SQLITE_URL)):
        return ChosenDatabase(DEMO_SQLITE_URL, "demo")
    return ChosenDatabase(DEFAULT_SQLITE_URL, "default")


def missing_sqlite_message(chosen: ChosenDatabase) -> str:
    """The one line for a SQLite URL whose file does not exist."""
    path = sqlite_path(chosen.url) or ""
    origin = "the default" if chosen.source == "default" else f"from {chosen.source}"
    return (
        f"no SQLite database at {redact_url(chosen.url)} ({origin}; looked for "
        f"{os.path.abspath(path)}): point the command at yours with --database-url URL or "
        f"{DATABASE_URL_ENV}, e.g. --database-url {DEMO_SQLITE_URL} for the demo's"
    )
