"""Enlisting a message to a DBOS workflow in the store's unit of work: the one adapter.

A message that must commit with the store's writes (a submit's answer, a persistent
session's inbox entry) is written in the unit of work bound to the task, and becomes visible
to the waiting ``DBOS.recv`` exactly when the unit commits. On Postgres the store writes
DBOS's row itself, in the unit's one statement (its format: ``dbos_messages.py``); on SQLite
DBOS's public client writes it.
"""

from __future__ import annotations

from typing import Any, Protocol

from .batch import current_batch, settle
from .engine import joined

__all__ = ["Sender", "enlist"]


class Sender(Protocol):
    """DBOS's client, which writes the row itself where the store does not (SQLite)."""

    def send_in_transaction(
        self, sync_conn: Any, workflow_id: str, message: Any, topic: str, key: str
    ) -> None:
        """Insert the message row on ``sync_conn``, in its transaction."""


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
