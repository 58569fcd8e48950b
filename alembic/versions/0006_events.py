"""The per-session event stream (served over SSE, resumable by sequence).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from helix_dbos._alembic_types import Json

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "__agents_events",
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("sequence", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("run_id", sa.Text, nullable=True),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("data", Json, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "sequence", name="pk___agents_events"),
    )


def downgrade() -> None:
    op.drop_table("__agents_events")
