"""Who owns a session, and the approval inbox.

``__agents_states`` gains ``principal`` and ``tenant`` (nullable): who started the session,
from the authenticate hook's answer or the Python API's arguments; sub-agents inherit them.

``__agents_approvals`` holds one row per approval a human can answer now: an approval call in
a session's ``pending_client_tool_calls`` that has no stored answer, whose run is the
session's current run, while the session is ``running`` or ``suspended_client_tool``. The
table is a projection of those maps, kept by triggers on ``__agents_states`` in the same
transaction as every write of a map (on Postgres and SQLite alike): every path that parks,
answers, expires, interrupts, abandons, rewinds or ends a call changes the map, and so the
inbox, whoever writes it (the runtime, or an operator's SQL). Existing pending approvals are
copied in by this revision.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from helix_dbos._alembic_types import Json

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_COLUMNS = (
    "session_id, tool_call_id, approval_id, root_session_id, run_id, agent_type, tool_name, "
    "input, args_digest, principal, tenant, registered_at, deadline_at"
)
_LIVE = "('running', 'suspended_client_tool')"

# -- Postgres ---------------------------------------------------------------------------------


def _pg_rows(s: str) -> str:
    """The rows of one session row named ``s`` (``NEW`` in the trigger, the table otherwise)."""
    return f"""
    SELECT {s}.session_id, p.key, p.value ->> 'approvalId', {s}.root_session_id, {s}.run_id,
        {s}.agent_type, p.value ->> 'toolName', p.value -> 'input', p.value ->> 'argsDigest',
        {s}.principal, {s}.tenant, (p.value ->> 'registeredAt')::numeric::bigint,
        (p.value ->> 'deadlineAt')::numeric::bigint
    FROM jsonb_each({s}.pending_client_tool_calls) AS p(key, value)
    WHERE {s}.status IN {_LIVE}
        AND p.value ->> 'kind' = 'approval'
        AND p.value ->> 'submittedAt' IS NULL
        AND p.value ->> 'approvalId' IS NOT NULL
        AND p.value ->> 'runId' = {s}.run_id
    """


_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION __agents_approvals_sync() RETURNS trigger AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM __agents_approvals WHERE session_id = OLD.session_id;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO __agents_approvals ({_COLUMNS}) {_pg_rows("NEW")};
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""
# Fired only when what the projection reads changed, and never for a session that has no
# pending call before or after (the common write: a turn without client calls).
_PG_TRIGGERS = (
    """
    CREATE TRIGGER __agents_approvals_sync_update
    AFTER UPDATE OF pending_client_tool_calls, status, run_id, principal, tenant
    ON __agents_states FOR EACH ROW
    WHEN ((OLD.pending_client_tool_calls <> '{}'::jsonb
            OR NEW.pending_client_tool_calls <> '{}'::jsonb)
        AND (OLD.pending_client_tool_calls IS DISTINCT FROM NEW.pending_client_tool_calls
            OR OLD.status IS DISTINCT FROM NEW.status
            OR OLD.run_id IS DISTINCT FROM NEW.run_id
            OR OLD.principal IS DISTINCT FROM NEW.principal
            OR OLD.tenant IS DISTINCT FROM NEW.tenant))
    EXECUTE FUNCTION __agents_approvals_sync()
    """,
    """
    CREATE TRIGGER __agents_approvals_sync_insert
    AFTER INSERT ON __agents_states FOR EACH ROW
    WHEN (NEW.pending_client_tool_calls <> '{}'::jsonb)
    EXECUTE FUNCTION __agents_approvals_sync()
    """,
    """
    CREATE TRIGGER __agents_approvals_sync_delete
    AFTER DELETE ON __agents_states FOR EACH ROW
    EXECUTE FUNCTION __agents_approvals_sync()
    """,
)

# -- SQLite -----------------------------------------------------------------------------------


def _sqlite_rows(s: str) -> str:
    """The rows of one session row named ``s`` (``NEW`` in a trigger, the table otherwise)."""

    def field(name: str) -> str:
        return f"json_extract(p.value, '$.{name}')"

    return f"""
    SELECT {s}.session_id, p.key, {field("approvalId")}, {s}.root_session_id, {s}.run_id,
        {s}.agent_type, {field("toolName")}, json({field("input")}), {field("argsDigest")},
        {s}.principal, {s}.tenant, {field("registeredAt")}, {field("deadlineAt")}
    FROM json_each({s}.pending_client_tool_calls) AS p
    WHERE {s}.status IN {_LIVE}
        AND {field("kind")} = 'approval'
        AND {field("submittedAt")} IS NULL
        AND {field("approvalId")} IS NOT NULL
        AND {field("runId")} = {s}.run_id
    """


_SQLITE_TRIGGERS = (
    f"""
    CREATE TRIGGER __agents_approvals_sync_update
    AFTER UPDATE OF pending_client_tool_calls, status, run_id, principal, tenant
    ON __agents_states FOR EACH ROW
    WHEN (OLD.pending_client_tool_calls <> '{{}}' OR NEW.pending_client_tool_calls <> '{{}}')
        AND (OLD.pending_client_tool_calls IS NOT NEW.pending_client_tool_calls
            OR OLD.status IS NOT NEW.status
            OR OLD.run_id IS NOT NEW.run_id
            OR OLD.principal IS NOT NEW.principal
            OR OLD.tenant IS NOT NEW.tenant)
    BEGIN
        DELETE FROM __agents_approvals WHERE session_id = OLD.session_id;
        INSERT INTO __agents_approvals ({_COLUMNS}) {_sqlite_rows("NEW")};
    END
    """,
    f"""
    CREATE TRIGGER __agents_approvals_sync_insert
    AFTER INSERT ON __agents_states FOR EACH ROW
    WHEN NEW.pending_client_tool_calls <> '{{}}'
    BEGIN
        INSERT INTO __agents_approvals ({_COLUMNS}) {_sqlite_rows("NEW")};
    END
    """,
    """
    CREATE TRIGGER __agents_approvals_sync_delete
    AFTER DELETE ON __agents_states FOR EACH ROW
    BEGIN
        DELETE FROM __agents_approvals WHERE session_id = OLD.session_id;
    END
    """,
)

_TRIGGER_NAMES = (
    "__agents_approvals_sync_update",
    "__agents_approvals_sync_insert",
    "__agents_approvals_sync_delete",
)


def upgrade() -> None:
    op.add_column("__agents_states", sa.Column("principal", sa.Text, nullable=True))
    op.add_column("__agents_states", sa.Column("tenant", sa.Text, nullable=True))
    op.create_table(
        "__agents_approvals",
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("tool_call_id", sa.Text, nullable=False),
        sa.Column("approval_id", sa.Text, nullable=False),
        sa.Column("root_session_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("agent_type", sa.Text, nullable=False),
        sa.Column("tool_name", sa.Text, nullable=False),
        sa.Column("input", Json, nullable=True),
        sa.Column("args_digest", sa.Text, nullable=True),
        sa.Column("principal", sa.Text, nullable=True),
        sa.Column("tenant", sa.Text, nullable=True),
        sa.Column("registered_at", sa.BigInteger, nullable=False),
        sa.Column("deadline_at", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("session_id", "tool_call_id", name="pk___agents_approvals"),
    )
    # Oldest first, under each filter the inbox offers: the key after the filter's column is
    # the page's order (and its cursor).
    order = ["registered_at", "session_id", "tool_call_id"]
    op.create_index("ix___agents_approvals_oldest", "__agents_approvals", order)
    op.create_index("ix___agents_approvals_tenant", "__agents_approvals", ["tenant", *order])
    op.create_index("ix___agents_approvals_principal", "__agents_approvals", ["principal", *order])
    op.create_index("ix___agents_approvals_tool", "__agents_approvals", ["tool_name", *order])
    op.create_index("ix___agents_approvals_root", "__agents_approvals", ["root_session_id"])
    op.create_index("ix___agents_approvals_deadline", "__agents_approvals", ["deadline_at"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        for trigger in _PG_TRIGGERS:
            op.execute(trigger)
        backfill = _pg_rows("s").replace(
            "FROM jsonb_each(s.", "FROM __agents_states AS s, jsonb_each(s."
        )
    else:
        for trigger in _SQLITE_TRIGGERS:
            op.execute(trigger)
        backfill = _sqlite_rows("s").replace(
            "FROM json_each(s.", "FROM __agents_states AS s, json_each(s."
        )
    op.execute(f"INSERT INTO __agents_approvals ({_COLUMNS}) {backfill}")


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in _TRIGGER_NAMES:
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON __agents_states" if postgres else ""))
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS __agents_approvals_sync()")
    for index in ("oldest", "tenant", "principal", "tool", "root", "deadline"):
        op.drop_index(f"ix___agents_approvals_{index}", table_name="__agents_approvals")
    op.drop_table("__agents_approvals")
    with op.batch_alter_table("__agents_states") as batch:
        batch.drop_column("tenant")
        batch.drop_column("principal")
