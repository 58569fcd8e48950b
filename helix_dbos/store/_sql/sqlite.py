"""SQLite's backend: its statements by name, and what it does its own way (``dialect.Backend``).

SQLite takes one writer at a time (no row locks, so nothing to skip or lock), has no schemas
(DBOS's tables have bare names), runs on one machine (its clock is this process's), keeps JSON
as text (``json_extract``), and has no driver pools of its own.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .. import pg
from .. import sqlite as sqlite_driver
from ..schema import HIBERNATED_DUE, HIBERNATED_ROW, LIVE_ROW

__all__ = ["SQLite"]

NAME = "sqlite"

_LIVE = "('running', 'suspended_client_tool')"

#: The pending client calls, counted by tool (``pending_figures``).
CLIENT_CALLS = f"""
SELECT 'client', json_extract(p.value, '$.toolName'), count(*), CAST(NULL AS BIGINT)
FROM __agents_states AS s, json_each(s.pending_client_tool_calls) AS p
WHERE s.updated_at >= :since
    AND s.pending_client_tool_calls <> '{{}}'
    AND s.status IN {_LIVE}
    AND json_extract(p.value, '$.kind') = 'client'
    AND json_extract(p.value, '$.submittedAt') IS NULL
    AND json_extract(p.value, '$.runId') = s.run_id
    AND json_extract(p.value, '$.deadlineAt') > :now
GROUP BY json_extract(p.value, '$.toolName')
"""

#: SQLite would walk the tool index for the lapsed approvals' GROUP BY, reading every row; it
#: is told to take the deadline index (Postgres takes it by itself).
LAPSED_APPROVALS_FROM = "__agents_approvals INDEXED BY ix___agents_approvals_deadline"


class SQLite:
    """The store on SQLite, where it differs from Postgres (``dialect.Backend``)."""

    __slots__ = ()

    name = NAME
    row_locks = False
    live_row = LIVE_ROW[NAME]
    hibernated_due = HIBERNATED_DUE[NAME]
    hibernated_row = HIBERNATED_ROW[NAME]
    claim_due_batches: str | None = None
    client_calls = CLIENT_CALLS
    lapsed_approvals_from = LAPSED_APPROVALS_FROM
    figures_plan: tuple[str, ...] = ()
    skip_locked = ""
    migration_lock: str | None = None
    migration_unlock: str | None = None
    collation: str | None = None

    @staticmethod
    def insert(table: sa.Table) -> sqlite.Insert:
        """An INSERT on ``table`` that takes ``ON CONFLICT`` clauses."""
        return sqlite.insert(table)

    @staticmethod
    def now() -> Any:
        """The fleet's clock: this machine's (the one machine)."""
        return datetime.now(UTC)

    @staticmethod
    def ago(seconds: float) -> Any:
        """The fleet's clock ``seconds`` ago."""
        return datetime.now(UTC) - timedelta(seconds=seconds)

    @staticmethod
    def dbos_table(schema: str, table: str) -> str:
        """One of DBOS's tables as SQL: SQLite has no schemas."""
        return table

    @staticmethod
    def lean_pool(engine: AsyncEngine) -> pg.LeanPool | None:
        """None: the driver pools are Postgres's."""
        return None

    @staticmethod
    async def opened(conn: AsyncConnection) -> None:
        """A store transaction just opened on ``conn``: it takes the write lock, so that what
        it reads holds until it commits (``sqlite.hold_writes``)."""
        await sqlite_driver.hold_writes(conn)
