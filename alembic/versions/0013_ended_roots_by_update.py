"""Ended session trees by their last write: the retention sweeper's page reads them off an index.

The sweeper (every runtime, and ``helix-dbos prune``) asks for the roots that ended before a
cutoff, the oldest first. Through the plain ``updated_at`` index that page would walk every
hibernated and parked session (older, but not ended) before reaching an ended one. This
partial index holds the ended roots only. No column changes.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_INDEX = "ix___agents_states_ended_roots_updated_at"
# Kept verbatim in helix_dbos/store/schema.py (ENDED_ROOT): the sweeper's query repeats it.
_ENDED_ROOT = "status IN ('completed', 'failed', 'interrupted') AND session_id = root_session_id"


def upgrade() -> None:
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {_INDEX} ON __agents_states (updated_at, session_id) "
        f"WHERE {_ENDED_ROOT}"
    )


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {_INDEX}")
