"""The messages DBOS holds for a turn's workflow (its system tables share the store's
database), read back with their row keys and bodies: what a stop sent, and to whom."""

from __future__ import annotations

import base64
import json
import pickle
from typing import Any

import sqlalchemy as sa

from helix_dbos.runtime import AgentRuntime, names
from helix_dbos.store import dbos_messages


async def messages_to(rt: AgentRuntime, workflow_id: str) -> list[tuple[str, str, Any]]:
    """Every message DBOS holds for ``workflow_id``, consumed or not: each its topic, its row
    key and its body, in key order."""
    table = "dbos.notifications" if rt.store.dialect == "postgresql" else "notifications"
    async with rt.store.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.text(
                    f"SELECT topic, message_uuid, message, serialization FROM {table}"
                    " WHERE destination_uuid = :d ORDER BY message_uuid"
                ),
                {"d": workflow_id},
            )
        ).all()
    found = []
    for topic, key, message, serialization in rows:
        if serialization == dbos_messages.PORTABLE_JSON:
            body = json.loads(message)
        else:  # DBOS's default: a pickle of what was sent, in base64
            body = pickle.loads(base64.b64decode(message))
        found.append((topic, key, body))
    return found


def stops(workflow_id: str, run_id: str, tool_call_ids: list[str]) -> list[tuple[str, str, Any]]:
    """What ``messages_to`` reads after a stop of ``run_id``'s calls: one ``stop`` message on
    each call's topic, keyed by the run and the call (so a second stop of them adds none)."""
    return sorted(
        (
            names.tool_result_topic(tcid),
            dbos_messages.row_key(names.control_idempotency_key(run_id, tcid, "stop"), workflow_id),
            {"kind": "stop"},
        )
        for tcid in tool_call_ids
    )
