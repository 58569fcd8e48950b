"""Usage rows: client-tool wait and outcome counters, token usage.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from helix_dbos._alembic_types import BigId, Json

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "__agents_usage",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.Text, nullable=True),
        sa.Column("run_id", sa.Text, nullable=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("source_type", sa.Text, nullable=False),
        sa.Column("source_name", sa.Text, nullable=True),
        sa.Column("data", Json, nullable=False),
        sa.Column("timestamp", sa.BigInteger, nullable=False),
        sa.Column("dedupe_key", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk___agents_usage"),
    )
    # The runbook's queries filter on source_type over the last hour and group per tool.
    op.create_index(
        "ix___agents_usage_source_type_timestamp",
        "__agents_usage",
        ["source_type", "timestamp", "source_name"],
    )
    op.create_index("ix___agents_usage_session_id", "__agents_usage", ["session_id"])
    # A replayed step writes the same key: the row is never counted twice.
    op.create_index("uq___agents_usage_dedupe_key", "__agents_usage", ["dedupe_key"], unique=True)


def downgrade() -> None:
    op.drop_table("__agents_usage")
