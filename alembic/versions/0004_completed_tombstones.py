"""Durable already_completed markers on the root session.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from helix_dbos._alembic_types import Json

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Additive and nullable: old rows read as "no markers".
    with op.batch_alter_table("__agents_states") as batch:
        batch.add_column(sa.Column("completed_client_tool_calls", Json, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("__agents_states") as batch:
        batch.drop_column("completed_client_tool_calls")
