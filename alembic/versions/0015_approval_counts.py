"""The pending approvals counted by tool as they change: the metrics' scrape reads a few rows.

The scrape's gauge of pending approvals counted the inbox's rows by tool on the tool index:
an index-only scan of every pending approval, 0.8-1 s a scrape beside 1,000,000 of them.
``__agents_approval_counts`` holds the count instead, kept exact by triggers on
``__agents_approvals`` in the same transaction as every insert, delete or update of its rows
(the inbox's own triggers write those, from the session rows' pending maps): a row per
(tool, slot) whose ``n`` adds up, over the slots, to the tool's rows.

On Postgres the triggers are per statement (their transition tables give the rows a statement
added and removed) and add to the slot of the database connection that writes
(``pg_backend_pid()``): a connection runs one transaction at a time, so no two writers ever
update the same row, and a write never waits for another. The scrape merges the slots of
connections into slot 0 when they pile up (``store/pending_figures.py``). On SQLite, which has
one writer at a time, the triggers are per row and add to slot 0.

The upgrade counts the rows there are, with the inbox's table locked against writes.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_TABLE = "__agents_approval_counts"

_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {_TABLE}_sync() RETURNS trigger AS $$
BEGIN
    -- One statement's change per tool, added to this connection's slot; tools in order, so
    -- a merge that takes several rows of slot 0 never deadlocks with another.
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {_TABLE} AS c (tool_name, slot, n)
        SELECT tool_name, pg_backend_pid(), count(*) FROM added
        GROUP BY tool_name ORDER BY tool_name
        ON CONFLICT (tool_name, slot) DO UPDATE SET n = c.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO {_TABLE} AS c (tool_name, slot, n)
        SELECT tool_name, pg_backend_pid(), -count(*) FROM removed
        GROUP BY tool_name ORDER BY tool_name
        ON CONFLICT (tool_name, slot) DO UPDATE SET n = c.n + excluded.n;
    ELSE
        INSERT INTO {_TABLE} AS c (tool_name, slot, n)
        SELECT tool_name, pg_backend_pid(), sum(delta) FROM (
            SELECT tool_name, 1 AS delta FROM added
            UNION ALL
            SELECT tool_name, -1 FROM removed
        ) AS changed
        GROUP BY tool_name HAVING sum(delta) <> 0 ORDER BY tool_name
        ON CONFLICT (tool_name, slot) DO UPDATE SET n = c.n + excluded.n;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""

_PG_TRIGGERS = (
    f"""
    CREATE TRIGGER {_TABLE}_insert AFTER INSERT ON __agents_approvals
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION {_TABLE}_sync()
    """,
    f"""
    CREATE TRIGGER {_TABLE}_delete AFTER DELETE ON __agents_approvals
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION {_TABLE}_sync()
    """,
    f"""
    CREATE TRIGGER {_TABLE}_update AFTER UPDATE ON __agents_approvals
    REFERENCING OLD TABLE AS removed NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION {_TABLE}_sync()
    """,
)


def _sqlite_add(tool: str, delta: int) -> str:
    return f"""
        INSERT OR IGNORE INTO {_TABLE} (tool_name, slot, n) VALUES ({tool}, 0, 0);
        UPDATE {_TABLE} SET n = n + ({delta}) WHERE tool_name = {tool} AND slot = 0;"""


_SQLITE_TRIGGERS = (
    f"""
    CREATE TRIGGER {_TABLE}_insert AFTER INSERT ON __agents_approvals FOR EACH ROW
    BEGIN {_sqlite_add("NEW.tool_name", 1)}
    END
    """,
    f"""
    CREATE TRIGGER {_TABLE}_delete AFTER DELETE ON __agents_approvals FOR EACH ROW
    BEGIN {_sqlite_add("OLD.tool_name", -1)}
    END
    """,
    f"""
    CREATE TRIGGER {_TABLE}_update AFTER UPDATE OF tool_name ON __agents_approvals
    FOR EACH ROW WHEN OLD.tool_name IS NOT NEW.tool_name
    BEGIN {_sqlite_add("OLD.tool_name", -1)} {_sqlite_add("NEW.tool_name", 1)}
    END
    """,
)

_TRIGGER_NAMES = (f"{_TABLE}_insert", f"{_TABLE}_delete", f"{_TABLE}_update")


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        _TABLE,
        sa.Column("tool_name", sa.Text, nullable=False),
        sa.Column("slot", sa.Integer, nullable=False),
        sa.Column("n", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("tool_name", "slot", name=f"pk_{_TABLE}"),
    )
    if postgres:
        # No park or answer may change the inbox between the count and the triggers.
        op.execute("LOCK TABLE __agents_approvals IN SHARE ROW EXCLUSIVE MODE")
        op.execute(_PG_FUNCTION)
        for trigger in _PG_TRIGGERS:
            op.execute(trigger)
    else:
        for trigger in _SQLITE_TRIGGERS:
            op.execute(trigger)
    op.execute(
        f"INSERT INTO {_TABLE} (tool_name, slot, n)"
        " SELECT tool_name, 0, count(*) FROM __agents_approvals GROUP BY tool_name"
    )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in _TRIGGER_NAMES:
        op.execute(
            f"DROP TRIGGER IF EXISTS {name}" + (" ON __agents_approvals" if postgres else "")
        )
    if postgres:
        op.execute(f"DROP FUNCTION IF EXISTS {_TABLE}_sync()")
    op.drop_table(_TABLE)
