"""Running the Alembic revisions from code: at startup (under a lock) or ``helix-dbos migrate``."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError as MigrationCommandError

from ..config import parse_database_url
from ..errors import ConfigError, SchemaNotCurrentError
from .dialect import backend_of
from .schema import VERSION_TABLE

__all__ = [
    "MIGRATE_COMMAND",
    "MigrationCommandError",
    "current_revision",
    "head_revision",
    "require_current_schema",
    "script_location",
    "upgrade",
]

MIGRATE_COMMAND = "helix-dbos migrate"
# Any constant works: it only has to be the same in every process that migrates.
_ADVISORY_LOCK_KEY = 0x68656C6978  # "helix"


def script_location() -> Path:
    """The Alembic script folder: inside the wheel, or the repository's ``alembic/``."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_alembic", package.parent / "alembic"):
        if (candidate / "env.py").is_file():
            return candidate
    raise ConfigError("The helix-dbos Alembic scripts are missing from this installation")


def _config(connection: sa.Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    cfg.set_main_option("version_table", VERSION_TABLE)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision this package ships."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def _engine(database_url: str) -> sa.Engine:
    urls = parse_database_url(database_url)
    return sa.create_engine(urls.sync, poolclass=sa.pool.NullPool)


def upgrade(database_url: str, revision: str = "head") -> str:
    """Migrate the session tables to ``revision``; safe when several processes start at once.

    Returns:
        The revision the database is at afterwards.
    """
    engine = _engine(database_url)
    try:
        with engine.connect() as conn:
            backend = backend_of(conn)
            if backend.migration_lock is not None:
                # Two processes starting together: the second waits, then finds nothing to do.
                conn.execute(sa.text(backend.migration_lock), {"k": _ADVISORY_LOCK_KEY})
                conn.commit()
            try:
                command.upgrade(_config(conn), revision)
                conn.commit()
            finally:
                if backend.migration_unlock is not None:
                    conn.execute(sa.text(backend.migration_unlock), {"k": _ADVISORY_LOCK_KEY})
                    conn.commit()
            return _current(conn) or ""
    finally:
        engine.dispose()


def _current(conn: sa.Connection) -> str | None:
    return MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE}
    ).get_current_revision()


def current_revision(database_url: str) -> str | None:
    """The revision the database is at, or ``None`` before the first migration."""
    engine = _engine(database_url)
    try:
        with engine.connect() as conn:
            return _current(conn)
    finally:
        engine.dispose()


def require_current_schema(database_url: str) -> None:
    """Fail with the command to run when the session tables are missing or behind.

    Raises:
        SchemaNotCurrentError: the database is not at the head revision.
        ConfigError: the role may not read the version table (its grants are missing).
    """
    try:
        current = current_revision(database_url)
    except sa.exc.ProgrammingError as exc:
        if "permission denied" not in str(exc.orig).lower():
            raise
        # Migrated by the owner, but this role was never granted our tables.
        raise ConfigError(
            f"This database role may not read {VERSION_TABLE}: grant it SELECT, INSERT, "
            "UPDATE and DELETE on the __agents_* tables (and USAGE on their sequences) after "
            f"running `{MIGRATE_COMMAND}` as the owner.",
        ) from None
    head = head_revision()
    if current != head:
        raise SchemaNotCurrentError(
            f"The helix-dbos session tables are at revision {current or 'none'}, this version "
            f"needs {head}. Run `{MIGRATE_COMMAND}` with HELIX_DATABASE_URL set, as a role "
            "that may run DDL.",
            current=current,
            head=head,
        )
