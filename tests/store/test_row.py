"""The session row's one declaration (``store/row.py``) agrees with the table and round-trips."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql

from helix_dbos.core.session import SessionState
from helix_dbos.store import row
from helix_dbos.store.schema import states
from tests.store.store_builders import pending_call, session

#: The table's columns no session field maps to (written by the store itself).
_STORE_ONLY = {"created_at", "updated_at"}


def test_the_declaration_names_every_column_of_the_table_once() -> None:
    table = [c.name for c in states.columns if c.name not in _STORE_ONLY]
    assert sorted(row.COLUMNS) == sorted(table)
    assert len(set(row.COLUMNS)) == len(row.COLUMNS)


def test_the_declared_types_are_the_tables() -> None:
    """The Postgres type each column is declared with is the one the table has."""
    pg = postgresql.dialect()  # type: ignore[no-untyped-call]
    for name, declared in row.SQL_TYPES.items():
        assert states.c[name].type.compile(dialect=pg).lower() == declared, name


def test_writable_columns_are_what_encode_writes() -> None:
    assert tuple(row.encode(session("s1"))) == row.WRITABLE
    assert not {"session_id", "version", "event_seq"} & set(row.WRITABLE)
    assert row.COLUMNS[row.EVENT_SEQ] == "event_seq"


def _stored(state: SessionState, event_seq: int = 7) -> dict[str, Any]:
    """The row as the table holds ``state``."""
    return {
        "session_id": state.session_id,
        "version": state.version,
        "event_seq": event_seq,
        **row.encode(state),
    }


def _rich() -> SessionState:
    state = session(
        "child", root="root", status="suspended_client_tool", run_id="run_1", workflow_id="wf"
    )
    state.pending["tc1"] = pending_call("tc1", "edit", "run_1")
    state.ownership["tc1"] = "child"
    state.metadata["hibernated"] = {"dueAt": 5}
    state.error = {"code": "x", "message": "y"}
    state.latest_checkpoint_id = "cp"
    state.principal = "alice"
    state.tenant = "acme"
    state.version = 3
    return state


def test_a_session_round_trips_by_name_and_by_position() -> None:
    for state in (session("s1"), _rich()):
        stored = _stored(state)
        assert row.decode(stored) == state
        assert row.decode_tuple(tuple(stored[c] for c in row.COLUMNS)) == state


def test_the_select_list_is_the_declared_order() -> None:
    assert row.SELECT_LIST.split(", ") == list(row.COLUMNS)
    assert row.select_list("s").split(", ") == [f"s.{c}" for c in row.COLUMNS]
