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
from typing import Any, Protocol

from .batch import current_batch, settle
from .engine import joined

__all__ = ["INSERT_CTE", "PORTABLE_JSON", "Sender", "enlist", "message_row", "row_key"]


class Sender(Protocol):
    """DBOS's client, which writes the row itself where the store does not (SQLite)."""

    def send_in_transaction(
        self, sync_conn: Any, workflow_id: str, message: Any, topic: str, key: str
    ) -> None:
        """Insert the message row on ``sync_conn``, in its transaction."""


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


async def enlist(
    workflow_id: str, message: Any, topic: str, key: str, sender: Sender | None
) -> None:
    """Write ``message`` to ``workflow_id`` in the unit of work bound to the task, keyed as
    ``DBOS.send(..., idempotency_key=key)`` keys it, and send the unit's writes: the message is
    its last write (nothing may be sent after it).

    On Postgres the row rides in the unit's one statement (``WriteBatch.notify``), in the
    format above (a duplicate key is dropped as DBOS drops it). On SQLite, DBOS's public
    ``DBOSClient.send_in_transaction`` (``sender``) writes it, after the queued writes.

    Raises:
        sqlalchemy.exc.IntegrityError: ``workflow_id`` does not exist (Postgres).
    """
    conn = joined()
    batch = current_batch(conn)
    if batch is not None:
        batch.notify(workflow_id, topic, message, key)
        # The unit's last write (every caller enlists last): alone, it needs no BEGIN.
        await batch.flush(last=True)
        return
    assert sender is not None, "no DBOS client to enlist with"
    await settle(conn)
    await conn.run_sync(
        lambda sync_conn: sender.send_in_transaction(sync_conn, workflow_id, message, topic, key)
    )
