"""The session row (``__agents_states``): its columns, their order and their codec, once.

Every statement that reads or writes a whole session row is built from ``COLUMNS``: the
driver's SELECT list and its positional decoding (``pg.py``), the batch's record types
(``batch.py``), SQLAlchemy's bind parameters (``sessions.py``) and its decoding by name
(``sqlite_paths.py``, ``listing.py``, ``hibernated.py``). A column added to the table
(``schema.py``, with its migration) is added here once, and ``tests/store/test_row.py`` fails
while the two disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

from ..core.session import PendingCall, SessionState, Tombstone

__all__ = [
    "COLUMNS",
    "EVENT_SEQ",
    "SELECT_LIST",
    "SQL_TYPES",
    "WRITABLE",
    "decode",
    "decode_tuple",
    "encode",
    "select_list",
]

#: The columns a session is read from, in the order of every row selection, with their
#: Postgres types. ``session_id`` and ``version`` are the row's key and its swap counter;
#: ``event_seq`` is the row's event sequence (kept by the store, not part of ``SessionState``).
SQL_TYPES: dict[str, str] = {
    "session_id": "text",
    "agent_type": "text",
    "root_session_id": "text",
    "parent_session_id": "text",
    "status": "text",
    "run_id": "text",
    "workflow_id": "text",
    "version": "integer",
    "pending_client_tool_calls": "jsonb",
    "client_tool_call_ownership": "jsonb",
    "completed_client_tool_calls": "jsonb",
    "metadata": "jsonb",
    "error": "jsonb",
    "latest_checkpoint_id": "text",
    "event_seq": "bigint",
    "principal": "text",
    "tenant": "text",
}
COLUMNS: tuple[str, ...] = tuple(SQL_TYPES)

#: The columns a write of a session sets from its state (``encode``'s keys), in this order.
WRITABLE: tuple[str, ...] = tuple(
    c for c in COLUMNS if c not in ("session_id", "version", "event_seq")
)

_AT = {name: i for i, name in enumerate(COLUMNS)}
#: Index of ``event_seq`` in a selected row.
EVENT_SEQ = _AT["event_seq"]


def select_list(alias: str = "") -> str:
    """The SELECT list of a whole row, in ``COLUMNS``' order (``alias.``-qualified)."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + c for c in COLUMNS)


SELECT_LIST = select_list()


def encode(state: SessionState) -> dict[str, Any]:
    """The writable columns' values of ``state`` (JSON columns as plain dicts)."""
    return {
        "agent_type": state.agent_type,
        "root_session_id": state.root_session_id,
        "parent_session_id": state.parent_session_id,
        "status": state.status,
        "run_id": state.run_id,
        "workflow_id": state.workflow_id,
        "pending_client_tool_calls": {k: v.dump() for k, v in state.pending.items()},
        "client_tool_call_ownership": dict(state.ownership),
        "completed_client_tool_calls": (
            {k: v.dump() for k, v in state.completed.items()} if state.completed else None
        ),
        "metadata": state.metadata,
        "error": state.error,
        "latest_checkpoint_id": state.latest_checkpoint_id,
        "principal": state.principal,
        "tenant": state.tenant,
    }


def decode(m: Mapping[Any, Any]) -> SessionState:
    """A session from a row read by column name (SQLAlchemy's ``row._mapping``)."""
    return _state(
        m["session_id"],
        m["agent_type"],
        m["root_session_id"],
        m["parent_session_id"],
        m["status"],
        m["run_id"],
        m["workflow_id"],
        m["version"],
        m["pending_client_tool_calls"],
        m["client_tool_call_ownership"],
        m["completed_client_tool_calls"],
        m["metadata"],
        m["error"],
        m["latest_checkpoint_id"],
        m["principal"],
        m["tenant"],
    )


def decode_tuple(row: Sequence[Any]) -> SessionState:
    """A session from a row selected in ``COLUMNS``' order (the driver's tuples)."""
    return _state(*_decoded(row))


#: The values ``_state`` takes, picked from a selected row (every column but ``event_seq``).
_decoded = itemgetter(*(_AT[c] for c in COLUMNS if c != "event_seq"))


def _state(
    session_id: str,
    agent_type: str,
    root_session_id: str,
    parent_session_id: str | None,
    status: Any,
    run_id: str | None,
    workflow_id: str | None,
    version: int,
    pending: dict[str, Any] | None,
    ownership: dict[str, Any] | None,
    completed: dict[str, Any] | None,
    metadata: dict[str, Any] | None,
    error: Any,
    latest_checkpoint_id: str | None,
    principal: str | None,
    tenant: str | None,
) -> SessionState:
    return SessionState(
        session_id=session_id,
        agent_type=agent_type,
        root_session_id=root_session_id,
        parent_session_id=parent_session_id,
        status=status,
        run_id=run_id,
        workflow_id=workflow_id,
        version=version,
        pending={k: PendingCall.model_validate(v) for k, v in pending.items()} if pending else {},
        ownership=dict(ownership or {}),
        completed=(
            {k: Tombstone.model_validate(v) for k, v in completed.items()} if completed else {}
        ),
        metadata=dict(metadata or {}),
        error=error,
        latest_checkpoint_id=latest_checkpoint_id,
        principal=principal,
        tenant=tenant,
    )
