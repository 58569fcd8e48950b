"""The notification outbox: one row per event of a parked call that an app's hooks are told.

``__agents_notifications`` holds the events of parked calls (``pending``, ``deadline_near``,
``expired``, ``resolved``), each written in the same transaction as the park, the answer, the
expiry or the stop it reports, under a unique ``event_key`` (the hooks' idempotency key). A
dispatcher in each runtime claims the rows that are due (``due_at``; ``FOR UPDATE SKIP LOCKED``
on Postgres), calls the hooks, and settles them (``state``): delivered at least once, retried
with backoff until then.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from helix_dbos._alembic_types import BigId, Json

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "__agents_notifications",
        sa.Column("id", BigId, nullable=False, autoincrement=True),
        sa.Column("event_key", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("root_session_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("tool_call_id", sa.Text, nullable=False),
        sa.Column("tool_name", sa.Text, nullable=False),
        sa.Column("payload", Json, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("due_at", sa.BigInteger, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("state", sa.Text, nullable=False, server_default="queued"),
        sa.Column("settled_at", sa.BigInteger, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk___agents_notifications"),
    )
    op.create_index(
        "uq___agents_notifications_event_key", "__agents_notifications", ["event_key"], unique=True
    )
    op.create_index(
        "ix___agents_notifications_state_due_at", "__agents_notifications", ["state", "due_at"]
    )
    op.create_index(
        "ix___agents_notifications_session_id", "__agents_notifications", ["session_id"]
    )
    op.create_index(
        "ix___agents_notifications_settled_at", "__agents_notifications", ["settled_at"]
    )


def downgrade() -> None:
    for index in ("settled_at", "session_id", "state_due_at"):
        op.drop_index(f"ix___agents_notifications_{index}", table_name="__agents_notifications")
    op.drop_index("uq___agents_notifications_event_key", table_name="__agents_notifications")
    op.drop_table("__agents_notifications")
