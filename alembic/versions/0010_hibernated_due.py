"""Hibernated turns: an index on when each hibernated batch falls due.

A turn parked past its hot window hibernates: its workflow ends and the session's row keeps
its mark, ``metadata.hibernated``, whose ``dueAt`` says when the batch's continuation must
start with no request. The deadline keeper of every runtime asks for the due rows; this
partial expression index holds hibernated rows only, so that query reads the index, however
many sessions there are. No column changes.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_INDEX = "ix___agents_states_hibernated_due"
# Kept verbatim in helix_dbos/store/hibernated.py: the keeper's query repeats them.
_DUE = {
    "postgresql": "((metadata -> 'hibernated' ->> 'dueAt')::bigint)",
    "sqlite": "(CAST(json_extract(metadata, '$.hibernated.dueAt') AS INTEGER))",
}
_HIBERNATED = {
    "postgresql": "(metadata -> 'hibernated') IS NOT NULL",
    "sqlite": "json_extract(metadata, '$.hibernated') IS NOT NULL",
}


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {_INDEX} ON __agents_states ({_DUE[dialect]}) "
        f"WHERE {_HIBERNATED[dialect]}"
    )


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {_INDEX}")
