"""The decision record, and the inbox's view of an approval's policy.

``__agents_approval_decisions`` holds one row per answer to an approval (an approval, counted
towards a quorum or deciding the call, an edit, a denial) and per expiry's policy outcome,
written by the runtime in the same transaction as what it records, and never updated: who
decided, as the authentication hook or token established it, with which kind of credential,
when, against which argument digest (and the edited one), with what reason.

``__agents_approvals`` gains ``policy`` (the call's approval policy and its quorum's state, as
the pending entry holds them) and ``barred_principal`` (the session's principal when four eyes
bar it from deciding: the inbox does not offer the approval to it). The triggers of revision
0008 are replaced by ones that fill them, and the inbox's rows are rebuilt.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from helix_dbos._alembic_types import BigId, Json

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_COLUMNS = (
    "session_id, tool_call_id, approval_id, root_session_id, run_id, agent_type, tool_name, "
    "input, args_digest, principal, tenant, registered_at, deadline_at, policy, barred_principal"
)
_OLD_COLUMNS = _COLUMNS.removesuffix(", policy, barred_principal")
_LIVE = "('running', 'suspended_client_tool')"
_TRIGGER_NAMES = (
    "__agents_approvals_sync_update",
    "__agents_approvals_sync_insert",
    "__agents_approvals_sync_delete",
)


def _pg_rows(s: str, columns: str) -> str:
    extra = (
        ""
        if columns == _OLD_COLUMNS
        else f""", p.value -> 'policy',
        CASE WHEN p.value -> 'policy' ->> 'fourEyes' = 'true' THEN {s}.principal END"""
    )
    return f"""
    SELECT {s}.session_id, p.key, p.value ->> 'approvalId', {s}.root_session_id, {s}.run_id,
        {s}.agent_type, p.value ->> 'toolName', p.value -> 'input', p.value ->> 'argsDigest',
        {s}.principal, {s}.tenant, (p.value ->> 'registeredAt')::numeric::bigint,
        (p.value ->> 'deadlineAt')::numeric::bigint{extra}
    FROM jsonb_each({s}.pending_client_tool_calls) AS p(key, value)
    WHERE {s}.status IN {_LIVE}
        AND p.value ->> 'kind' = 'approval'
        AND p.value ->> 'submittedAt' IS NULL
        AND p.value ->> 'approvalId' IS NOT NULL
        AND p.value ->> 'runId' = {s}.run_id
    """


def _pg_function(columns: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION __agents_approvals_sync() RETURNS trigger AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM __agents_approvals WHERE session_id = OLD.session_id;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO __agents_approvals ({columns}) {_pg_rows("NEW", columns)};
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""


def _sqlite_rows(s: str, columns: str) -> str:
    def field(name: str) -> str:
        return f"json_extract(p.value, '$.{name}')"

    extra = (
        ""
        if columns == _OLD_COLUMNS
        else f""", json({field("policy")}),
        CASE WHEN {field("policy.fourEyes")} = 1 THEN {s}.principal END"""
    )
    return f"""
    SELECT {s}.session_id, p.key, {field("approvalId")}, {s}.root_session_id, {s}.run_id,
        {s}.agent_type, {field("toolName")}, json({field("input")}), {field("argsDigest")},
        {s}.principal, {s}.tenant, {field("registeredAt")}, {field("deadlineAt")}{extra}
    FROM json_each({s}.pending_client_tool_calls) AS p
    WHERE {s}.status IN {_LIVE}
        AND {field("kind")} = 'approval'
        AND {field("submittedAt")} IS NULL
        AND {field("approvalId")} IS NOT NULL
        AND {field("runId")} = {s}.run_id
    """


def _sqlite_triggers(columns: str) -> tuple[str, ...]:
    return (
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
        INSERT INTO __agents_approvals ({columns}) {_sqlite_rows("NEW", columns)};
    END
    """,
        f"""
    CREATE TRIGGER __agents_approvals_sync_insert
    AFTER INSERT ON __agents_states FOR EACH ROW
    WHEN NEW.pending_client_tool_calls <> '{{}}'
    BEGIN
        INSERT INTO __agents_approvals ({columns}) {_sqlite_rows("NEW", columns)};
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


def _sync(columns: str) -> None:
    """Install the inbox's triggers writing ``columns``, and rebuild its rows from the maps."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_pg_function(columns))  # the triggers of 0008 call it
        backfill = _pg_rows("s", columns).replace(
            "FROM jsonb_each(s.", "FROM __agents_states AS s, jsonb_each(s."
        )
    else:
        for name in _TRIGGER_NAMES:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        for trigger in _sqlite_triggers(columns):
            op.execute(trigger)
        backfill = _sqlite_rows("s", columns).replace(
            "FROM json_each(s.", "FROM __agents_states AS s, json_each(s."
        )
    op.execute("DELETE FROM __agents_approvals")
    op.execute(f"INSERT INTO __agents_approvals ({columns}) {backfill}")


def upgrade() -> None:
    op.add_column("__agents_approvals", sa.Column("policy", Json, nullable=True))
    op.add_column("__agents_approvals", sa.Column("barred_principal", sa.Text, nullable=True))
    _sync(_COLUMNS)
    op.create_table(
        "__agents_approval_decisions",
        sa.Column("id", BigId, nullable=False, autoincrement=True),
        sa.Column("decision_key", sa.Text, nullable=False),
        sa.Column("approval_id", sa.Text, nullable=False),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("root_session_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("tool_call_id", sa.Text, nullable=False),
        sa.Column("tool_name", sa.Text, nullable=False),
        sa.Column("args_digest", sa.Text, nullable=True),
        sa.Column("edited_digest", sa.Text, nullable=True),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("final", sa.Boolean, nullable=False),
        sa.Column("votes", sa.Integer, nullable=True),
        sa.Column("quorum", sa.Integer, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("on_timeout", sa.Text, nullable=True),
        sa.Column("principal", sa.Text, nullable=True),
        sa.Column("tenant", sa.Text, nullable=True),
        sa.Column("credential", sa.Text, nullable=False),
        sa.Column("roles", Json, nullable=True),
        sa.Column("owner_principal", sa.Text, nullable=True),
        sa.Column("owner_tenant", sa.Text, nullable=True),
        sa.Column("decided_at", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk___agents_approval_decisions"),
    )
    table = "__agents_approval_decisions"
    newest = ["decided_at", "id"]
    op.create_index(f"uq_{table}_decision_key", table, ["decision_key"], unique=True)
    op.create_index(f"ix_{table}_newest", table, newest)
    op.create_index(f"ix_{table}_owner_tenant", table, ["owner_tenant", *newest])
    op.create_index(f"ix_{table}_owner_principal", table, ["owner_principal", *newest])
    op.create_index(f"ix_{table}_principal", table, ["principal", *newest])
    op.create_index(f"ix_{table}_approval_id", table, ["approval_id"])
    op.create_index(f"ix_{table}_root", table, ["root_session_id"])


def downgrade() -> None:
    op.drop_table("__agents_approval_decisions")
    _sync(_OLD_COLUMNS)
    with op.batch_alter_table("__agents_approvals") as batch:
        batch.drop_column("barred_principal")
        batch.drop_column("policy")
