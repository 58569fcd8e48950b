"""Live sessions by their last write: the reconciler's page reads them off an index.

Every reconciler pass (every runtime, every few seconds) asks for the sessions with a turn
active and no hibernation that were last written before a cutoff: a stuck turn to repair.
Read through the plain ``updated_at`` index, that query walked every hibernated session (an
active status, but nothing to judge) before reaching a live one: with 100,000 hibernated
approvals, about 170 ms of database time per pass per process. This partial index holds the
live rows only, so the page reads what it returns, however many sessions are hibernated. No
column changes.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_INDEX = "ix___agents_states_live_updated_at"
# Kept verbatim in helix_dbos/store/schema.py (LIVE_ROW): the reconciler's query repeats it.
_LIVE = {
    "postgresql": "status IN ('running', 'suspended_client_tool') "
    "AND (metadata -> 'hibernated') IS NULL",
    "sqlite": "status IN ('running', 'suspended_client_tool') "
    "AND json_extract(metadata, '$.hibernated') IS NULL",
}


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {_INDEX} ON __agents_states (updated_at) WHERE {_LIVE[dialect]}"
    )


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {_INDEX}")
