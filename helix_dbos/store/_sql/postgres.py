"""Postgres's backend: its statements by name, and what it does its own way (``dialect.Backend``).

Postgres has row locks (many writers at once), schemas (DBOS's tables are ``<schema>.<table>``),
its own clock for the whole fleet (``clock_timestamp()``), JSONB, and psycopg's driver pools
beside SQLAlchemy's (``pg.LeanPool``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .. import pg
from ..schema import HIBERNATED_DUE, HIBERNATED_ROW, LIVE_ROW

__all__ = ["Postgres"]

NAME = "postgresql"

_LIVE = "('running', 'suspended_client_tool')"

#: A page of due hibernated rows claimed in one statement (``hibernated.claim_due_batches``).
#: Rows another transaction holds (a second keeper's claim, a submit, a stop) are skipped, not
#: waited for: two keepers claim disjoint pages, and a skipped row that is still due is read by
#: the next pass. The claim moves the row's version on as any write does, so a writer that read
#: it before fails its compare-and-swap and reads it again. It returns what a continuation's
#: start needs (``hibernated.DueBatch``).
CLAIM_DUE_BATCHES = f"""
    WITH due AS (
        SELECT session_id FROM __agents_states
        WHERE {HIBERNATED_ROW[NAME]} AND {HIBERNATED_DUE[NAME]} <= %(now)s
            AND agent_type = ANY(%(types)s)
        ORDER BY {HIBERNATED_DUE[NAME]}
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    )
    UPDATE __agents_states AS s
    SET metadata = jsonb_set(s.metadata, '{{hibernated,dueAt}}', to_jsonb(%(until)s::bigint)),
        version = s.version + 1, updated_at = now()
    FROM due
    WHERE s.session_id = due.session_id
    RETURNING s.session_id, s.agent_type, s.root_session_id, s.run_id, s.metadata -> 'hibernated'
"""

#: The pending client calls, counted by tool (``pending_figures``).
CLIENT_CALLS = f"""
SELECT 'client', p.value ->> 'toolName', count(*), CAST(NULL AS BIGINT)
FROM __agents_states AS s, jsonb_each(s.pending_client_tool_calls) AS p
WHERE s.updated_at >= :since
    AND s.pending_client_tool_calls <> '{{}}'::jsonb
    AND s.status IN {_LIVE}
    AND p.value ->> 'kind' = 'client'
    AND p.value ->> 'submittedAt' IS NULL
    AND p.value ->> 'runId' = s.run_id
    AND (p.value ->> 'deadlineAt')::bigint > :now
GROUP BY p.value ->> 'toolName'
"""

#: Postgres plans the approvals' count as a parallel scan of the table (its rows hold the
#: arguments: several times the index's pages); the index alone answers it. And a statement
#: this cheap gains nothing from JIT compilation, which costs more than the query.
FIGURES_PLAN = ("SET LOCAL enable_seqscan = off", "SET LOCAL jit = off")

#: Two processes migrating at once: the second waits, then finds nothing to do.
MIGRATION_LOCK = "SELECT pg_advisory_lock(:k)"
MIGRATION_UNLOCK = "SELECT pg_advisory_unlock(:k)"

#: The database's collation (the retention sweeper ranges DBOS's keys when it orders bytes).
COLLATION = "SELECT datcollate FROM pg_database WHERE datname = current_database()"


class Postgres:
    """The store on Postgres, where it differs from SQLite (``dialect.Backend``)."""

    __slots__ = ()

    name = NAME
    row_locks = True
    live_row = LIVE_ROW[NAME]
    hibernated_due = HIBERNATED_DUE[NAME]
    hibernated_row = HIBERNATED_ROW[NAME]
    claim_due_batches: str | None = CLAIM_DUE_BATCHES
    client_calls = CLIENT_CALLS
    lapsed_approvals_from = "__agents_approvals"
    figures_plan: tuple[str, ...] = FIGURES_PLAN
    skip_locked = " FOR UPDATE SKIP LOCKED"
    migration_lock: str | None = MIGRATION_LOCK
    migration_unlock: str | None = MIGRATION_UNLOCK
    collation: str | None = COLLATION

    @staticmethod
    def insert(table: sa.Table) -> postgresql.Insert:
        """An INSERT on ``table`` that takes ``ON CONFLICT`` clauses."""
        return postgresql.insert(table)

    @staticmethod
    def now() -> Any:
        """The fleet's clock: the database's (one clock for every host)."""
        return sa.func.clock_timestamp()

    @staticmethod
    def ago(seconds: float) -> Any:
        """The fleet's clock ``seconds`` ago."""
        return sa.func.clock_timestamp() - timedelta(seconds=seconds)

    @staticmethod
    def dbos_table(schema: str, table: str) -> str:
        """One of DBOS's tables as SQL: in its schema."""
        return f"{schema}.{table}"

    @staticmethod
    def lean_pool(engine: AsyncEngine) -> pg.LeanPool | None:
        """A pool of psycopg connections beside ``engine``'s, as large as its pool."""
        size = engine.pool.size() if isinstance(engine.pool, sa.pool.QueuePool) else 5
        url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        return pg.LeanPool(url, size)

    @staticmethod
    async def opened(conn: AsyncConnection) -> None:
        """A store transaction just opened on ``conn``: nothing to do (row locks hold what it
        reads)."""
