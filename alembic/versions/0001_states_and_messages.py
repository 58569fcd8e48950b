"""Session rows and the message log.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from helix_dbos._alembic_types import EMPTY_OBJECT, BigId, Json

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "__agents_states",
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("agent_type", sa.Text, nullable=False),
        sa.Column("root_session_id", sa.Text, nullable=False),
        sa.Column("parent_session_id", sa.Text, nullable=True),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=True),
        sa.Column("workflow_id", sa.Text, nullable=True),
        sa.Column("version", sa.Integer, nullable=False, server_default="0"),
        sa.Column("event_seq", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("metadata", Json, nullable=False, server_default=EMPTY_OBJECT),
        sa.Column("error", Json, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk___agents_states"),
    )
    op.create_index("ix___agents_states_root_session_id", "__agents_states", ["root_session_id"])
    op.create_index("ix___agents_states_updated_at", "__agents_states", ["updated_at"])
    op.create_table(
        "__agents_messages",
        sa.Column("message_id", BigId, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("role", sa.Text, nullable=False),
        sa.Column("tool_call_id", sa.Text, nullable=True),
        sa.Column("content", Json, nullable=False),
        sa.Column("run_id", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "role IN ('user', 'assistant', 'tool', 'system')", name="ck___agents_messages_role"
        ),
        sa.PrimaryKeyConstraint("message_id", name="pk___agents_messages"),
    )
    op.create_index(
        "ix___agents_messages_session_id_message_id",
        "__agents_messages",
        ["session_id", "message_id"],
    )
    op.create_index(
        "uq___agents_messages_tool_result",
        "__agents_messages",
        ["session_id", "tool_call_id"],
        unique=True,
        postgresql_where=sa.text("role = 'tool'"),
        sqlite_where=sa.text("role = 'tool'"),
    )


def downgrade() -> None:
    op.drop_table("__agents_messages")
    op.drop_table("__agents_states")
