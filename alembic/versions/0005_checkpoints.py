"""Checkpoints in a prefixed table, and the session's pointer to its latest one.

The pointer names the most recently WRITTEN checkpoint. Ordering checkpoints by step count
returned a previous turn's checkpoint (step counts restart every turn): never do that.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from helix_dbos._alembic_types import Json

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "__agents_checkpoints",
        sa.Column("checkpoint_id", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=True),
        sa.Column("step_count", sa.Integer, nullable=False),
        sa.Column("message_count", sa.Integer, nullable=False),
        sa.Column("state", Json, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("checkpoint_id", name="pk___agents_checkpoints"),
    )
    op.create_index("ix___agents_checkpoints_session_id", "__agents_checkpoints", ["session_id"])
    with op.batch_alter_table("__agents_states") as batch:
        batch.add_column(sa.Column("latest_checkpoint_id", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("__agents_states") as batch:
        batch.drop_column("latest_checkpoint_id")
    op.drop_table("__agents_checkpoints")
