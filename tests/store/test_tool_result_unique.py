"""A second tool result for the same session and tool call cannot be written, on both backends."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from helix_dbos.config import parse_database_url
from helix_dbos.core.messages import Message, ToolCall
from helix_dbos.store.store import SessionStore
from tests.store.store_builders import session


def tool_result(call_id: str, value: object = "ok") -> Message:
    """A tool message answering ``call_id``."""
    return Message(role="tool", tool_call_id=call_id, tool_name="confirm_dialog", result=value)


@contextmanager
def raw_connection(url: str) -> Iterator[Any]:
    """A plain DB-API connection (psycopg or sqlite3), committing on success."""
    urls = parse_database_url(url)
    conn: Any
    if urls.is_sqlite:
        conn = sqlite3.connect(urls.user.removeprefix("sqlite:///"))
    else:
        conn = psycopg.connect(urls.user)
    try:
        yield conn
        conn.commit()
    finally:
        conn.close()


def raw_insert_sql(url: str) -> str:
    """An INSERT of one tool message, in each driver's parameter style."""
    mark = "?" if parse_database_url(url).is_sqlite else "%s"
    return (
        "INSERT INTO __agents_messages (session_id, role, tool_call_id, content, created_at) "
        f"VALUES ({mark}, 'tool', {mark}, '{{}}', CURRENT_TIMESTAMP)"
    )


def integrity_error(url: str) -> type[Exception]:
    """The driver's own integrity error class."""
    return sqlite3.IntegrityError if parse_database_url(url).is_sqlite else psycopg.IntegrityError


async def test_second_result_through_the_store_fails(store: SessionStore) -> None:
    """append_messages of a second tool result raises IntegrityError and writes nothing."""
    await store.create_session(session("s1"))
    await store.append_messages(
        "s1",
        "run-1",
        [
            Message(role="assistant", tool_calls=[ToolCall(id="call_1", name="confirm_dialog")]),
            tool_result("call_1"),
        ],
    )
    with pytest.raises(sa.exc.IntegrityError):
        await store.append_messages("s1", "run-2", [tool_result("call_1", "again")])
    # The whole batch is refused: a message before the duplicate is not written either.
    with pytest.raises(sa.exc.IntegrityError):
        await store.append_messages(
            "s1", "run-2", [Message(role="user", content="hi"), tool_result("call_1", "again")]
        )
    stored = await store.load_messages("s1")
    assert [m.role for m in stored] == ["assistant", "tool"]
    assert stored[1].result == "ok"


async def test_duplicate_inside_one_batch_fails(store: SessionStore) -> None:
    """Two results for one call in a single append are refused as well."""
    await store.create_session(session("s1"))
    with pytest.raises(sa.exc.IntegrityError):
        await store.append_messages("s1", None, [tool_result("call_1"), tool_result("call_1")])
    assert await store.load_messages("s1") == []


async def test_what_the_index_allows(store: SessionStore) -> None:
    """The same id in another session, and non-tool rows with that id, are still allowed."""
    for sid in ("s1", "s2"):
        await store.create_session(session(sid))
        await store.append_messages(sid, None, [tool_result("call_1")])
    # The partial index covers tool rows only.
    await store.append_messages(
        "s1", None, [Message(role="assistant", content="x", tool_call_id="call_1")]
    )
    await store.append_messages("s1", None, [tool_result("call_2")])
    assert len(await store.load_messages("s1")) == 3
    assert len(await store.load_messages("s2")) == 1


def test_second_result_with_raw_sql_fails(migrated_url: str) -> None:
    """A raw INSERT of a second tool result fails in the database itself."""
    sql = raw_insert_sql(migrated_url)
    with raw_connection(migrated_url) as conn:
        conn.execute(sql, ("s1", "call_1"))
    with pytest.raises(integrity_error(migrated_url)), raw_connection(migrated_url) as conn:
        conn.execute(sql, ("s1", "call_1"))
    with raw_connection(migrated_url) as conn:
        count = conn.execute(
            "SELECT COUNT(*) FROM __agents_messages WHERE tool_call_id = 'call_1'"
        ).fetchone()
    assert count == (1,)


def test_raw_sql_respects_the_role_check(migrated_url: str) -> None:
    """Only the four known roles can be stored."""
    mark = "?" if parse_database_url(migrated_url).is_sqlite else "%s"
    with pytest.raises(integrity_error(migrated_url)), raw_connection(migrated_url) as conn:
        conn.execute(
            "INSERT INTO __agents_messages (session_id, role, content, created_at) "
            f"VALUES ({mark}, 'robot', '{{}}', CURRENT_TIMESTAMP)",
            ("s1",),
        )
