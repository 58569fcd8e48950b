"""The session tables, as SQLAlchemy Core tables: the one schema module.

Postgres is the production target (JSONB); the embedded SQLite default stores JSON as text.
Every column change arrives in its own Alembic revision under ``alembic/versions``; a test
checks that the revisions and these tables never drift apart.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

__all__ = [
    "EVENTS_CHANNEL",
    "ENDED_ROOT",
    "ENDED_ROOTS_INDEX",
    "HIBERNATED_DUE",
    "HIBERNATED_DUE_INDEX",
    "HIBERNATED_ROW",
    "LIVE_ROW",
    "LIVE_UPDATED_INDEX",
    "TABLE_PREFIX",
    "VERSION_TABLE",
    "adoptions",
    "approval_counts",
    "approval_decisions",
    "approvals",
    "checkpoints",
    "events",
    "executors",
    "messages",
    "metadata",
    "notifications",
    "states",
    "usage",
]

TABLE_PREFIX = "__agents_"
#: Alembic's version table for our revisions; never the host application's ``alembic_version``.
VERSION_TABLE = "__agents_alembic_version"
#: The Postgres NOTIFY channel an insert into ``__agents_events`` signals (payload: the
#: session id), from the trigger of revision 0007.
EVENTS_CHANNEL = "__agents_events"

#: Revision 0010's partial expression index on when a hibernated turn's batch falls due
#: (``metadata.hibernated.dueAt``), per dialect: its expression and its predicate. A query
#: repeats them verbatim so that the planner uses the index (``store/hibernated.py``).
HIBERNATED_DUE_INDEX = "ix___agents_states_hibernated_due"
HIBERNATED_DUE = {
    "postgresql": "((metadata -> 'hibernated' ->> 'dueAt')::bigint)",
    "sqlite": "(CAST(json_extract(metadata, '$.hibernated.dueAt') AS INTEGER))",
}
HIBERNATED_ROW = {
    "postgresql": "(metadata -> 'hibernated') IS NOT NULL",
    "sqlite": "json_extract(metadata, '$.hibernated') IS NOT NULL",
}
#: Revision 0011's partial index on ``updated_at`` of the live rows (a turn active, not
#: hibernated), per dialect: its predicate, which the reconciler's page repeats verbatim.
LIVE_UPDATED_INDEX = "ix___agents_states_live_updated_at"
LIVE_ROW = {
    "postgresql": "status IN ('running', 'suspended_client_tool') "
    "AND (metadata -> 'hibernated') IS NULL",
    "sqlite": "status IN ('running', 'suspended_client_tool') "
    "AND json_extract(metadata, '$.hibernated') IS NULL",
}
#: Revision 0013's partial index on ``(updated_at, session_id)`` of the ended roots: its
#: predicate, which the retention sweeper's page repeats verbatim (``store/retention.py``).
ENDED_ROOTS_INDEX = "ix___agents_states_ended_roots_updated_at"
ENDED_ROOT = "status IN ('completed', 'failed', 'interrupted') AND session_id = root_session_id"

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

#: JSONB on Postgres (the runbook's ``->>`` and ``'{}'::jsonb`` need it), JSON text elsewhere.
#: Python ``None`` is written as SQL NULL, never as JSON ``null``: a nullable column reads the
#: same ``IS NULL`` in rows written before its revision and rows written after it.
Json = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
#: A 64-bit id that autoincrements on Postgres and SQLite alike.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

states = sa.Table(
    "__agents_states",
    metadata,
    sa.Column("session_id", sa.Text, primary_key=True),
    sa.Column("agent_type", sa.Text, nullable=False),
    sa.Column("root_session_id", sa.Text, nullable=False),
    sa.Column("parent_session_id", sa.Text, nullable=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("run_id", sa.Text, nullable=True),
    sa.Column("workflow_id", sa.Text, nullable=True),
    sa.Column("version", sa.Integer, nullable=False, server_default="0"),
    sa.Column("event_seq", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("metadata", Json, nullable=False, server_default=sa.text("'{}'")),
    sa.Column("error", Json, nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    # 0002: the client-tool maps.
    sa.Column("pending_client_tool_calls", Json, nullable=False, server_default=sa.text("'{}'")),
    sa.Column("client_tool_call_ownership", Json, nullable=False, server_default=sa.text("'{}'")),
    # 0004: durable already_completed markers (root tombstones).
    sa.Column("completed_client_tool_calls", Json, nullable=True),
    # 0005: pointer to the most recently written checkpoint.
    sa.Column("latest_checkpoint_id", sa.Text, nullable=True),
    # 0008: who started the session (sub-agents inherit it).
    sa.Column("principal", sa.Text, nullable=True),
    sa.Column("tenant", sa.Text, nullable=True),
    sa.Index("ix___agents_states_root_session_id", "root_session_id"),
    sa.Index("ix___agents_states_updated_at", "updated_at"),
    # 0014: the reconciler's lookup of the sessions of a page of PENDING workflows.
    sa.Index("ix___agents_states_workflow_id", "workflow_id"),
)

messages = sa.Table(
    "__agents_messages",
    metadata,
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
    sa.Index("ix___agents_messages_session_id_message_id", "session_id", "message_id"),
    # At most one tool result per (session, tool_call_id): a duplicate cannot be written.
    sa.Index(
        "uq___agents_messages_tool_result",
        "session_id",
        "tool_call_id",
        unique=True,
        postgresql_where=sa.text("role = 'tool'"),
        sqlite_where=sa.text("role = 'tool'"),
    ),
)

usage = sa.Table(
    "__agents_usage",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.Text, nullable=True),
    sa.Column("run_id", sa.Text, nullable=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("source_type", sa.Text, nullable=False),
    sa.Column("source_name", sa.Text, nullable=True),
    sa.Column("data", Json, nullable=False),
    sa.Column("timestamp", sa.BigInteger, nullable=False),
    sa.Column("dedupe_key", sa.Text, nullable=True),
    # The runbook filters on source_type and the last hour, grouped per tool.
    sa.Index("ix___agents_usage_source_type_timestamp", "source_type", "timestamp", "source_name"),
    sa.Index("ix___agents_usage_session_id", "session_id"),
    sa.Index("uq___agents_usage_dedupe_key", "dedupe_key", unique=True),
)

checkpoints = sa.Table(
    "__agents_checkpoints",
    metadata,
    sa.Column("checkpoint_id", sa.Text, primary_key=True),
    sa.Column("session_id", sa.Text, nullable=False),
    sa.Column("run_id", sa.Text, nullable=True),
    sa.Column("step_count", sa.Integer, nullable=False),
    sa.Column("message_count", sa.Integer, nullable=False),
    sa.Column("state", Json, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix___agents_checkpoints_session_id", "session_id"),
)

events = sa.Table(
    "__agents_events",
    metadata,
    sa.Column("session_id", sa.Text, primary_key=True),
    sa.Column("sequence", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("run_id", sa.Text, nullable=True),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("data", Json, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

# 0007: the fleet.
executors = sa.Table(
    "__agents_executors",
    metadata,
    sa.Column("executor_id", sa.Text, primary_key=True),
    sa.Column("application_version", sa.Text, nullable=False),
    sa.Column("hostname", sa.Text, nullable=True),
    sa.Column("pid", sa.Integer, nullable=True),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("adopted_by", sa.Text, nullable=True),
    sa.Column("adopted_at", sa.DateTime(timezone=True), nullable=True),
)
"""One row per process that ran turns: its heartbeat, and who adopted its turns."""

adoptions = sa.Table(
    "__agents_adoptions",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("workflow_id", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("from_executor", sa.Text, nullable=False),
    sa.Column("from_version", sa.Text, nullable=False),
    sa.Column("adopted_by", sa.Text, nullable=False),
    sa.Column("to_version", sa.Text, nullable=False),
    sa.Column("adopted_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix___agents_adoptions_workflow_id", "workflow_id"),
)
"""One row per turn workflow taken over: ``adopted`` from a dead executor of the same
version, or ``forwarded`` from an earlier version this contract replays."""

# 0008: the approval inbox.
_OLDEST = ("registered_at", "session_id", "tool_call_id")
approvals = sa.Table(
    "__agents_approvals",
    metadata,
    sa.Column("session_id", sa.Text, primary_key=True),
    sa.Column("tool_call_id", sa.Text, primary_key=True),
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
    sa.Column("policy", Json, nullable=True),
    sa.Column("barred_principal", sa.Text, nullable=True),
    sa.Index("ix___agents_approvals_oldest", *_OLDEST),
    sa.Index("ix___agents_approvals_tenant", "tenant", *_OLDEST),
    sa.Index("ix___agents_approvals_principal", "principal", *_OLDEST),
    sa.Index("ix___agents_approvals_tool", "tool_name", *_OLDEST),
    sa.Index("ix___agents_approvals_root", "root_session_id"),
    sa.Index("ix___agents_approvals_deadline", "deadline_at"),
)
"""One row per approval a human can answer now, kept from the session rows' pending maps by
the triggers of revision 0008 (never written by the runtime itself): the inbox's index.
Revision 0012 adds the call's ``policy`` (with its quorum's state) and ``barred_principal``
(the session's principal when four eyes bar it from deciding)."""

# 0015: the pending approvals counted by tool.
approval_counts = sa.Table(
    "__agents_approval_counts",
    metadata,
    sa.Column("tool_name", sa.Text, primary_key=True),
    sa.Column("slot", sa.Integer, primary_key=True),
    sa.Column("n", sa.BigInteger, nullable=False),
)
"""How many rows of ``__agents_approvals`` each tool has: the sum of ``n`` over its slots,
kept by the triggers of revision 0015 in the same transaction as every change of the inbox's
rows (never written by the runtime itself; the metrics' scrape merges slots). On Postgres a
slot is the database connection that wrote (``pg_backend_pid()``), 0 once merged."""

# 0009: the notification outbox.
notifications = sa.Table(
    "__agents_notifications",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("event_key", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("session_id", sa.Text, nullable=False),
    sa.Column("root_session_id", sa.Text, nullable=False),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("tool_call_id", sa.Text, nullable=False),
    sa.Column("tool_name", sa.Text, nullable=False),
    sa.Column("payload", Json, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("due_at", sa.BigInteger, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("state", sa.Text, nullable=False, server_default="queued"),
    sa.Column("settled_at", sa.BigInteger, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Index("uq___agents_notifications_event_key", "event_key", unique=True),
    sa.Index("ix___agents_notifications_state_due_at", "state", "due_at"),
    sa.Index("ix___agents_notifications_session_id", "session_id"),
    sa.Index("ix___agents_notifications_settled_at", "settled_at"),
)
"""One row per event of a parked call that the app's notification hooks are told (``kind``
``pending``, ``deadline_near``, ``expired``, ``resolved``), written with the commit it reports
under its idempotency key ``event_key``; ``state`` ``queued`` until a dispatcher settles it
(``delivered``, ``skipped``, ``gave_up``). See ``store/outbox.py``."""

# 0012: the decision record.
_NEWEST = ("decided_at", "id")
approval_decisions = sa.Table(
    "__agents_approval_decisions",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
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
    sa.Index("uq___agents_approval_decisions_decision_key", "decision_key", unique=True),
    sa.Index("ix___agents_approval_decisions_newest", *_NEWEST),
    sa.Index("ix___agents_approval_decisions_owner_tenant", "owner_tenant", *_NEWEST),
    sa.Index("ix___agents_approval_decisions_owner_principal", "owner_principal", *_NEWEST),
    sa.Index("ix___agents_approval_decisions_principal", "principal", *_NEWEST),
    sa.Index("ix___agents_approval_decisions_approval_id", "approval_id"),
    sa.Index("ix___agents_approval_decisions_root", "root_session_id"),
)
"""One row per answer to an approval (an approval counted or deciding, an edit, a denial) and
per expiry's policy outcome, written in the same transaction as what it records and never
updated: who decided (as the credential established it), with which credential, when, on which
arguments. See ``store/decisions.py``."""
