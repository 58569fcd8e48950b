"""A message to a DBOS workflow written in our own transaction: DBOS's ``notifications`` row.

``DBOS.send`` (and ``DBOSClient.send_in_transaction``) deliver a message by inserting a row
into DBOS's ``notifications`` table, which DBOS's trigger announces to the waiting ``recv``
when the transaction commits. On Postgres the store writes that row itself, inside the
transaction's one flushed statement (``batch.WriteBatch.notify``): DBOS's client builds and
compiles its statement anew on every call, which cost more than the rest of a submit.

This module is the one place that knows DBOS's row format: the columns, the portable JSON
serialization and the row key DBOS derives from an idempotency key, so that a duplicate is
dropped exactly as DBOS drops it. ``tests/runtime/test_wake.py`` fails when DBOS's own client
writes a different row, or when DBOS's ``recv`` does not read ours as its own.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["INSERT_CTE", "PORTABLE_JSON", "message_row", "row_key"]


#: DBOS's name of its portable (plain JSON) serialization, which every DBOS client reads.
PORTABLE_JSON = "portable_json"

#: The insert, as a part of the batch's flush: fed by the ``notifications`` jsonb array
#: parameter (``message_row``'s dicts), in order; a duplicate key is dropped.
INSERT_CTE = """
    new_notifications AS (
        INSERT INTO dbos.notifications (destination_uuid, topic, message, message_uuid,
            serialization)
        SELECT r.destination_uuid, r.topic, r.message, r.message_uuid, r.serialization
        FROM jsonb_to_recordset(%(notifications)s::jsonb) AS r(i integer,
            destination_uuid text, topic text, message text, message_uuid text,
            serialization text)
        WHERE TRUE /*guard*/
        ORDER BY r.i
        ON CONFLICT (message_uuid) DO NOTHING
    )"""


def row_key(idempotency_key: str, workflow_id: str) -> str:
    """The row key DBOS derives from ``DBOS.send(..., idempotency_key=...)``."""
    return f"{idempotency_key}::{workflow_id}"


def message_row(
    workflow_id: str, topic: str, message: Any, idempotency_key: str, index: int
) -> dict[str, Any]:
    """The row DBOS inserts for ``message`` (JSON-serializable) to ``workflow_id`` on
    ``topic``, keyed by ``idempotency_key``; ``index`` orders a transaction's messages."""
    return {
        "i": index,
        "destination_uuid": workflow_id,
        "topic": topic,
        "message": json.dumps(message, separators=(",", ":"), ensure_ascii=False),
        "message_uuid": row_key(idempotency_key, workflow_id),
        "serialization": PORTABLE_JSON,
    }
