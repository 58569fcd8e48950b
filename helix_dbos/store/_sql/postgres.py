"""Postgres's SQL, by name: every statement only Postgres speaks (``dialect.Postgres`` holds them).

The hot reads on the driver connection (``pg.py``, psycopg's ``%s`` parameters), the append of
events and the usage insert of its side of the store's methods (``pg_paths.py``), the deadline
keeper's one-statement claim, the gauges' client calls over JSONB, the migrations' advisory
lock and the collation query of the retention sweeper. A statement that is the same on both
backends stays in the module that runs it.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from .. import row as session_row
from .. import schema
from ..schema import usage

NAME = "postgresql"
"""SQLAlchemy's name of the dialect."""

#: Revision 0010's index (when a hibernated row's batch falls due, and which rows it holds)
#: and revision 0011's predicate of a live row: queries repeat them verbatim.
HIBERNATED_DUE = schema.HIBERNATED_DUE[NAME]
HIBERNATED_ROW = schema.HIBERNATED_ROW[NAME]
LIVE_ROW = schema.LIVE_ROW[NAME]

#: The session row as these statements select it (``row.COLUMNS``' order).
_STATE_SELECT = session_row.SELECT_LIST

STATE_BY_ID = f"SELECT {_STATE_SELECT} FROM __agents_states WHERE session_id = %s"
STATES_BY_IDS = f"SELECT {_STATE_SELECT} FROM __agents_states WHERE session_id = ANY(%s)"
#: Locked in id order: two transactions locking the same rows never deadlock.
LOCK_STATES = STATES_BY_IDS + " ORDER BY session_id FOR UPDATE"

CHECKPOINT_COLUMNS = (
    "checkpoint_id",
    "session_id",
    "run_id",
    "step_count",
    "message_count",
    "state",
    "created_at",
)
CHECKPOINT_BY_ID = (
    f"SELECT {', '.join(CHECKPOINT_COLUMNS)} FROM __agents_checkpoints WHERE checkpoint_id = %s"
)

#: The conversation: the rows no rewind took out (``history.LIVE_MESSAGE``), oldest first.
LIVE_MESSAGES = (
    "SELECT role, content FROM __agents_messages"
    " WHERE session_id = %s AND (content ->> 'rewound') IS NULL ORDER BY message_id"
)
EVENTS_AFTER = (
    "SELECT sequence, type, run_id, data FROM __agents_events"
    " WHERE session_id = %s AND sequence > %s ORDER BY sequence LIMIT %s"
)

#: A model step's inputs in one statement: the session, the slot's recorded result, and
#: (unless recorded) the live conversation as ``[[role, content], ...]``.
STEP_INPUTS = f"""
    SELECT {session_row.select_list("s")},
        c.state,
        CASE WHEN c.state IS NULL THEN (
            SELECT jsonb_agg(jsonb_build_array(m.role, m.content) ORDER BY m.message_id)
            FROM __agents_messages AS m
            WHERE m.session_id = s.session_id AND (m.content ->> 'rewound') IS NULL
        ) END
    FROM __agents_states AS s
    LEFT JOIN __agents_checkpoints AS c ON c.checkpoint_id = %s
    WHERE s.session_id = %s
"""


#: A woken turn's inputs in one statement: the rows of the sessions (``= ANY``), each with
#: the live conversation of one of them (the owner's; the others' is NULL).
RESUME_INPUTS = f"""
    SELECT {session_row.select_list("s")},
        CASE WHEN s.session_id = %s THEN (
            SELECT jsonb_agg(jsonb_build_array(m.role, m.content) ORDER BY m.message_id)
            FROM __agents_messages AS m
            WHERE m.session_id = s.session_id AND (m.content ->> 'rewound') IS NULL
        ) END
    FROM __agents_states AS s
    WHERE s.session_id = ANY(%s)
"""


#: A hibernated turn's inputs as its continuation takes it up, in one statement: the rows of
#: ``RESUME_INPUTS``, the owner's with the recorded state of a checkpoint (its hibernate
#: commit's; NULL on the other rows, or when that commit did not land).
RESUME_INPUTS_RECORDED = f"""
    SELECT {session_row.select_list("s")},
        CASE WHEN s.session_id = %(sid)s THEN (
            SELECT jsonb_agg(jsonb_build_array(m.role, m.content) ORDER BY m.message_id)
            FROM __agents_messages AS m
            WHERE m.session_id = s.session_id AND (m.content ->> 'rewound') IS NULL
        ) END,
        CASE WHEN s.session_id = %(sid)s THEN (
            SELECT c.state FROM __agents_checkpoints AS c WHERE c.checkpoint_id = %(slot)s
        ) END
    FROM __agents_states AS s
    WHERE s.session_id = ANY(%(ids)s)
"""


#: A session and every session of its tree created after it (its root's other sessions, the
#: session itself first, then by creation), in one statement.
TREE = f"""
    SELECT {_STATE_SELECT}, 0 AS k, created_at FROM __agents_states WHERE session_id = %(sid)s
    UNION ALL
    SELECT {_STATE_SELECT}, 1 AS k, created_at FROM __agents_states
    WHERE root_session_id = (SELECT root_session_id FROM __agents_states WHERE session_id = %(sid)s)
        AND session_id <> root_session_id AND session_id <> %(sid)s
    ORDER BY k, created_at
"""


#: Appending events: the session's sequence taken and the rows inserted at once.
APPEND_EVENTS = sa.text(
    """
    WITH seq AS (
        UPDATE __agents_states SET event_seq = event_seq + :n
        WHERE session_id = :sid
        RETURNING event_seq
    )
    INSERT INTO __agents_events (session_id, sequence, run_id, type, data, created_at)
    SELECT :sid, seq.event_seq - :n + e.ord, :run, e.v->>'type', e.v->'data', :now
    FROM seq, jsonb_array_elements(CAST(:events AS jsonb)) WITH ORDINALITY AS e(v, ord)
    RETURNING sequence
    """
)

#: Usage rows whose ``dedupe_key`` exists already are skipped.
USAGE_INSERT = postgresql.insert(usage).on_conflict_do_nothing(index_elements=["dedupe_key"])


_LIVE = "('running', 'suspended_client_tool')"

#: A page of due hibernated rows claimed in one statement (``hibernated.claim_due_batches``).
#: Rows another transaction holds (a second keeper's claim, a submit, a stop) are skipped, not
#: waited for: two keepers claim disjoint pages, and a skipped row that is still due is read by
#: the next pass. The claim moves the row's version on as any write does, so a writer that read
#: it before fails its compare-and-swap and reads it again. It returns what a continuation's
#: start needs (``hibernated.DueBatch``).
CLAIM_DUE_BATCHES = f"""
    WITH due AS (
        SELECT session_id FROM __agents_states
        WHERE {HIBERNATED_ROW} AND {HIBERNATED_DUE} <= %(now)s
            AND agent_type = ANY(%(types)s)
        ORDER BY {HIBERNATED_DUE}
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    )
    UPDATE __agents_states AS s
    SET metadata = jsonb_set(s.metadata, '{{hibernated,dueAt}}', to_jsonb(%(until)s::bigint)),
        version = s.version + 1, updated_at = now()
    FROM due
    WHERE s.session_id = due.session_id
    RETURNING s.session_id, s.agent_type, s.root_session_id, s.run_id, s.metadata -> 'hibernated'
"""

#: The pending client calls, counted by tool (``pending_figures``).
CLIENT_CALLS = f"""
SELECT 'client', p.value ->> 'toolName', count(*), CAST(NULL AS BIGINT)
FROM __agents_states AS s, jsonb_each(s.pending_client_tool_calls) AS p
WHERE s.updated_at >= :since
    AND s.pending_client_tool_calls <> '{{}}'::jsonb
    AND s.status IN {_LIVE}
    AND p.value ->> 'kind' = 'client'
    AND p.value ->> 'submittedAt' IS NULL
    AND p.value ->> 'runId' = s.run_id
    AND (p.value ->> 'deadlineAt')::bigint > :now
GROUP BY p.value ->> 'toolName'
"""

#: Where the gauges count the lapsed approvals from: Postgres takes the deadline index itself.
LAPSED_APPROVALS_FROM = "__agents_approvals"

#: Postgres plans the approvals' count as a parallel scan of the table (its rows hold the
#: arguments: several times the index's pages); the index alone answers it. And a statement
#: this cheap gains nothing from JIT compilation, which costs more than the query.
FIGURES_PLAN = ("SET LOCAL enable_seqscan = off", "SET LOCAL jit = off")

#: Two processes migrating at once: the second waits, then finds nothing to do.
MIGRATION_LOCK = "SELECT pg_advisory_lock(:k)"
MIGRATION_UNLOCK = "SELECT pg_advisory_unlock(:k)"

#: The database's collation (the retention sweeper ranges DBOS's keys when it orders bytes).
COLLATION = "SELECT datcollate FROM pg_database WHERE datname = current_database()"


#: Folds the connections' slots of the approval counts into slot 0 (revision 0015), skipping a
#: slot a writer holds: a merge never waits on a park (``pending_figures.merge_approval_counts``).
MERGE_APPROVAL_COUNTS = """
WITH merged AS (
    DELETE FROM __agents_approval_counts
    WHERE ctid IN (
        SELECT ctid FROM __agents_approval_counts WHERE slot <> 0 FOR UPDATE SKIP LOCKED
    )
    RETURNING tool_name, n
)
INSERT INTO __agents_approval_counts AS c (tool_name, slot, n)
SELECT tool_name, 0, sum(n) FROM merged GROUP BY tool_name ORDER BY tool_name
ON CONFLICT (tool_name, slot) DO UPDATE SET n = c.n + excluded.n
"""
