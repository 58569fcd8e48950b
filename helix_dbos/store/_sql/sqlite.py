"""SQLite's SQL, by name: every statement only SQLite speaks (``dialect.SQLite`` holds them).

The reads of its side of the store's methods (``sqlite_paths.py``, SQLAlchemy Core built
once), the usage insert, and the gauges' client calls over JSON text (``json_extract``). A
statement that is the same on both backends stays in the module that runs it.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from .. import schema
from ..schema import checkpoints, states, usage

NAME = "sqlite"
"""SQLAlchemy's name of the dialect."""

#: Revision 0010's index (when a hibernated row's batch falls due, and which rows it holds)
#: and revision 0011's predicate of a live row: queries repeat them verbatim.
HIBERNATED_DUE = schema.HIBERNATED_DUE[NAME]
HIBERNATED_ROW = schema.HIBERNATED_ROW[NAME]
LIVE_ROW = schema.LIVE_ROW[NAME]

# Built once: SQLAlchemy then neither rebuilds them nor recomputes their cache keys per call.
STATE_BY_ID = states.select().where(states.c.session_id == sa.bindparam("sid"))
STATES_BY_IDS = states.select().where(states.c.session_id.in_(sa.bindparam("ids", expanding=True)))
CHECKPOINT_BY_ID = sa.select(checkpoints).where(
    checkpoints.c.checkpoint_id == sa.bindparam("checkpoint_id")
)


#: Usage rows whose ``dedupe_key`` exists already are skipped.
USAGE_INSERT = sqlite.insert(usage).on_conflict_do_nothing(index_elements=["dedupe_key"])


_LIVE = "('running', 'suspended_client_tool')"

#: The pending client calls, counted by tool (``pending_figures``).
CLIENT_CALLS = f"""
SELECT 'client', json_extract(p.value, '$.toolName'), count(*), CAST(NULL AS BIGINT)
FROM __agents_states AS s, json_each(s.pending_client_tool_calls) AS p
WHERE s.updated_at >= :since
    AND s.pending_client_tool_calls <> '{{}}'
    AND s.status IN {_LIVE}
    AND json_extract(p.value, '$.kind') = 'client'
    AND json_extract(p.value, '$.submittedAt') IS NULL
    AND json_extract(p.value, '$.runId') = s.run_id
    AND json_extract(p.value, '$.deadlineAt') > :now
GROUP BY json_extract(p.value, '$.toolName')
"""

#: SQLite would walk the tool index for the lapsed approvals' GROUP BY, reading every row; it
#: is told to take the deadline index (Postgres takes it by itself).
LAPSED_APPROVALS_FROM = "__agents_approvals INDEXED BY ix___agents_approvals_deadline"
