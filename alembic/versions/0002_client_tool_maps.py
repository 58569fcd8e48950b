"""Pending client-tool calls on the owner, and the ownership map on the root.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from helix_dbos._alembic_types import EMPTY_OBJECT, Json

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("__agents_states") as batch:
        batch.add_column(
            sa.Column(
                "pending_client_tool_calls", Json, nullable=False, server_default=EMPTY_OBJECT
            )
        )
        batch.add_column(
            sa.Column(
                "client_tool_call_ownership", Json, nullable=False, server_default=EMPTY_OBJECT
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("__agents_states") as batch:
        batch.drop_column("client_tool_call_ownership")
        batch.drop_column("pending_client_tool_calls")
