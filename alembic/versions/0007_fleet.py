"""A fleet on one database: executors' heartbeats, adoptions, and pushed event wake-ups.

``__agents_executors`` holds one row per process (its heartbeat); ``__agents_adoptions`` one
row per turn workflow a live process took over from a dead one. On Postgres, an ``AFTER
INSERT`` trigger on ``__agents_events`` sends ``NOTIFY __agents_events, '<session id>'``, so
event streams wake when their session's events commit instead of polling.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from helix_dbos._alembic_types import BigId

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_NOTIFY_FUNCTION = """
CREATE OR REPLACE FUNCTION __agents_events_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('__agents_events', NEW.session_id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""
_NOTIFY_TRIGGER = """
CREATE TRIGGER __agents_events_notify AFTER INSERT ON __agents_events
FOR EACH ROW EXECUTE FUNCTION __agents_events_notify()
"""


def upgrade() -> None:
    op.create_table(
        "__agents_executors",
        sa.Column("executor_id", sa.Text, nullable=False),
        sa.Column("application_version", sa.Text, nullable=False),
        sa.Column("hostname", sa.Text, nullable=True),
        sa.Column("pid", sa.Integer, nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("adopted_by", sa.Text, nullable=True),
        sa.Column("adopted_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("executor_id", name="pk___agents_executors"),
    )
    op.create_table(
        "__agents_adoptions",
        sa.Column("id", BigId, nullable=False, autoincrement=True),
        sa.Column("workflow_id", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("from_executor", sa.Text, nullable=False),
        sa.Column("from_version", sa.Text, nullable=False),
        sa.Column("adopted_by", sa.Text, nullable=False),
        sa.Column("to_version", sa.Text, nullable=False),
        sa.Column("adopted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk___agents_adoptions"),
    )
    op.create_index("ix___agents_adoptions_workflow_id", "__agents_adoptions", ["workflow_id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_NOTIFY_FUNCTION)
        op.execute(_NOTIFY_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS __agents_events_notify ON __agents_events")
        op.execute("DROP FUNCTION IF EXISTS __agents_events_notify()")
    op.drop_index("ix___agents_adoptions_workflow_id", table_name="__agents_adoptions")
    op.drop_table("__agents_adoptions")
    op.drop_table("__agents_executors")
