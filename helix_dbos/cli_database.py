"""Which database the operator commands read, kept importable by this path: the module is
``helix_dbos.cli.database``."""

from __future__ import annotations

from .cli.database import (
    DATABASE_URL_ENV,
    DEMO_SQLITE_URL,
    ChosenDatabase,
    choose_database,
    missing_sqlite_message,
    sqlite_path,
)

__all__ = [
    "DATABASE_URL_ENV",
    "DEMO_SQLITE_URL",
    "ChosenDatabase",
    "choose_database",
    "missing_sqlite_message",
    "sqlite_path",
]
