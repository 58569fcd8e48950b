"""Sessions by their turn's workflow: the reconciler's orphan lookup reads an index.

Every reconciler pass lists the PENDING turn workflows and asks which of them belong to a
session that has ended (an orphan to cancel): ``workflow_id IN (<a page of ids>)``. With no
index on ``workflow_id`` that lookup walked ``updated_at`` through every session, hibernated
ones included: 1.2 to 1.8 s a pass beside 1,000,000 hibernated sessions, whenever turns were
running (a deadline keeper's burst of continuations). This index makes it a page of lookups.
No column changes.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix___agents_states_workflow_id", "__agents_states", ["workflow_id"])


def downgrade() -> None:
    op.drop_index("ix___agents_states_workflow_id", table_name="__agents_states")
