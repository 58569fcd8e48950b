"""SQLite's transactions for the store: immediate, waited for, and locked from their start.

SQLite has one writer at a time. The store's engine on SQLite

* begins every transaction ``IMMEDIATE`` (``configure``): a deferred transaction that reads
  and then writes fails at once with "database is locked" when another writer got in
  between, where an immediate one waits its turn (``busy_timeout``), as DBOS's own SQLite
  engines do;
* takes the write lock as a store transaction opens (``hold_writes``): the driver sends its
  ``BEGIN`` only before the first write, so the reads before it would run outside the
  transaction, and another writer could commit between what a body read and what it then
  writes (a message delivered to a persistent workflow that hibernated meanwhile, say). Held
  from the start, what a body reads stays true until it commits, as under Postgres's row
  locks (``tests/store/test_concurrency.py::test_what_a_transaction_read_holds_until_it_commits``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["configure", "hold_writes"]

BUSY_TIMEOUT_MS = 30_000


def configure(engine: AsyncEngine) -> None:
    """Make every transaction of ``engine`` immediate, waiting out other writers."""
    event.listens_for(engine.sync_engine, "connect")(_on_connect)
    _keep_immediate_transactions(engine.sync_engine.dialect)


async def hold_writes(conn: AsyncConnection) -> None:
    """Take the database's write lock now, as ``conn``'s transaction opens."""
    await conn.exec_driver_sql("BEGIN IMMEDIATE")


def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = "IMMEDIATE"
    cursor = dbapi_conn.cursor()
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cursor.close()


def _keep_immediate_transactions(dialect: Any) -> None:
    """Keep transactions ``BEGIN IMMEDIATE`` whatever isolation level a caller sets:
    SQLAlchemy's SQLite dialect resets the driver to a deferred ``BEGIN`` whenever an
    isolation level is applied (DBOS applies one on every transaction it opens)."""
    original = dialect.set_isolation_level

    def set_isolation_level(dbapi_connection: Any, level: Any) -> None:
        original(dbapi_connection, level)
        if level != "AUTOCOMMIT":
            dbapi_connection.isolation_level = "IMMEDIATE"

    dialect.set_isolation_level = set_isolation_level
