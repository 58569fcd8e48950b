"""The insert-only parts of the one statement a Postgres transaction flushes (``batch.py``).

Each part inserts rows that no other part of the statement reads and nothing updates in the
same transaction: the notification outbox's rows (``store/outbox.py``) and the decision
record's (``store/decisions.py``). Each is fed by one ``jsonb`` array parameter of its name;
``i`` keeps the rows in the order they were queued. A row whose unique key exists (a replayed
commit) is dropped.
"""

from __future__ import annotations

__all__ = ["APPENDED", "DECISIONS", "OUTBOX"]

OUTBOX = "outbox"
DECISIONS = "decisions"

#: part name -> its CTE.
APPENDED: dict[str, str] = {
    # The events of parked calls an app's hooks are told (``store/outbox.py``).
    OUTBOX: """
    new_outbox AS (
        INSERT INTO __agents_notifications (event_key, kind, session_id, root_session_id,
            run_id, tool_call_id, tool_name, payload, created_at, due_at, attempts, state)
        SELECT r.event_key, r.kind, r.session_id, r.root_session_id, r.run_id, r.tool_call_id,
            r.tool_name, r.payload, r.created_at, r.due_at, 0, 'queued'
        FROM jsonb_to_recordset(%(outbox)s::jsonb) AS r(i integer, event_key text, kind text,
            session_id text, root_session_id text, run_id text, tool_call_id text,
            tool_name text, payload jsonb, created_at bigint, due_at bigint)
        WHERE TRUE /*guard*/
        ORDER BY r.i
        ON CONFLICT (event_key) DO NOTHING
    )""",
    # Who decided an approval (``store/decisions.py``).
    DECISIONS: """
    new_decisions AS (
        INSERT INTO __agents_approval_decisions (decision_key, approval_id, session_id,
            root_session_id, run_id, tool_call_id, tool_name, args_digest, edited_digest,
            outcome, final, votes, quorum, reason, on_timeout, principal, tenant, credential,
            roles, owner_principal, owner_tenant, decided_at)
        SELECT r.decision_key, r.approval_id, r.session_id, r.root_session_id, r.run_id,
            r.tool_call_id, r.tool_name, r.args_digest, r.edited_digest, r.outcome, r.final,
            r.votes, r.quorum, r.reason, r.on_timeout, r.principal, r.tenant, r.credential,
            r.roles, r.owner_principal, r.owner_tenant, r.decided_at
        FROM jsonb_to_recordset(%(decisions)s::jsonb) AS r(i integer, decision_key text,
            approval_id text, session_id text, root_session_id text, run_id text,
            tool_call_id text, tool_name text, args_digest text, edited_digest text,
            outcome text, final boolean, votes integer, quorum integer, reason text,
            on_timeout text, principal text, tenant text, credential text, roles jsonb,
            owner_principal text, owner_tenant text, decided_at bigint)
        WHERE TRUE /*guard*/
        ORDER BY r.i
        ON CONFLICT (decision_key) DO NOTHING
    )""",
}
