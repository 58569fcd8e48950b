"""``bench/bulk_park.py`` writes exactly the rows a real park and hibernation write.

A session is parked for real (the template), a second one too (the reference); the loader
then makes sessions of the template. A loaded session and the reference are compared table
by table, ours and DBOS's, column by column: the same rows and the same values once each
session's own ids, times, serial ids and DBOS's ``creator_xid`` are set aside (DBOS's pickled
inputs and outputs are compared decoded, their ids set aside too). Then a loaded session is
answered through the normal submit and its turn completes, and another one, made due, is
fired by the deadline keeper as a real one is.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import importlib
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helix_dbos.config import HelixSettings
from helix_dbos.runtime import AgentRuntime

pytestmark = pytest.mark.postgres_only

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
bulk_park: Any = importlib.import_module("bulk_park")
hibernation: Any = importlib.import_module("hibernation")

_TIME = re.compile(
    r"(?<![0-9A-Za-z._])1[0-9]{12}(?![0-9A-Za-z])"  # epoch ms
    r"|(?<![0-9A-Za-z._])1[0-9]{9}\.[0-9]+(?![0-9A-Za-z])"  # epoch seconds (DBOS's sleep)
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\+00"  # timestamps
)
_SERIAL = {("public", "__agents_messages"): "message_id", ("public", "__agents_usage"): "id"}


@pytest.fixture
async def runtime(pg_url: str) -> AsyncIterator[AgentRuntime]:
    settings = HelixSettings(
        database_url=pg_url,
        executor_id="bulk-test",
        application_version="bench",
        deadline_keeper_seconds=0.2,
    )
    rt = AgentRuntime(hibernation.AGENTS, settings)
    await rt.launch()
    try:
        yield rt
    finally:
        await rt.shutdown()


async def _park(rt: AgentRuntime) -> str:
    handle = await rt.start("cold", "go")
    outcome = await handle.workflow.get_result()
    assert outcome["outcome"] == "hibernated"
    return handle.session_id


def _ids_of(conn: psycopg.Connection[Any], session_id: str) -> list[str]:
    row = conn.execute(
        "SELECT run_id, pending_client_tool_calls FROM __agents_states WHERE session_id = %s",
        (session_id,),
    ).fetchone()
    assert row is not None
    return [session_id, str(row[0]), *row[1].keys()]


def _normalized(conn: psycopg.Connection[Any], session_id: str) -> dict[str, list[list[str]]]:
    """Every row of ``session_id`` in every table, as COPY text, its own ids replaced by
    names, its times by ``<time>``, pickles decoded; serial ids and ``creator_xid`` out."""
    ids = _ids_of(conn, session_id)
    out: dict[str, list[list[str]]] = {}
    for schema, table, key in bulk_park.TABLES:
        cols = [
            r[0]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
                " AND table_name = %s ORDER BY ordinal_position",
                (schema, table),
            )
        ]
        where = f"{key} = %s" if schema == "public" else f"{key} LIKE %s"
        value = session_id if schema == "public" else f"helix:{session_id}:%"
        with conn.cursor() as cur:
            cur.execute(f'SELECT * FROM "{schema}"."{table}" WHERE {where}', (value,))
            rows = cur.fetchall()
        table_rows = []
        for row in rows:
            fields = []
            for col, cell in zip(cols, row, strict=True):
                if col == "creator_xid" or _SERIAL.get((schema, table)) == col:
                    continue
                fields.append(f"{col}={_cell(cell, ids)}")
            table_rows.append(fields)
        out[f"{schema}.{table}"] = sorted(table_rows)
    return out


def _cell(cell: Any, ids: list[str]) -> str:
    text = cell if isinstance(cell, str) else repr(cell)
    if isinstance(cell, str) and len(cell) >= 8:
        try:
            raw = base64.b64decode(cell, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if any(i.encode() in raw for i in ids):
            for n, i in enumerate(ids):
                raw = raw.replace(i.encode(), f"<id{n}>".encode())
            return "pickle:" + repr(raw)
    for n, i in enumerate(ids):
        text = text.replace(i, f"<id{n}>")
    if not isinstance(cell, str):
        text = (
            str(cell)
            if not hasattr(cell, "isoformat")
            else cell.strftime("%Y-%m-%d %H:%M:%S.%f+00")
        )
        for n, i in enumerate(ids):
            text = text.replace(i, f"<id{n}>")
    return _TIME.sub("<time>", text)


async def _status(rt: AgentRuntime, session_id: str, want: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (await rt.store.get(session_id)).status != want:
        assert time.monotonic() < deadline, f"{session_id} never became {want}"
        await asyncio.sleep(0.1)


async def test_a_loaded_session_is_a_parked_one(runtime: AgentRuntime, pg_url: str) -> None:
    template_id = await _park(runtime)
    reference = await _park(runtime)
    template = bulk_park.read_template(pg_url, template_id)
    loaded = bulk_park.load(pg_url, template, 3, spread_seconds=30.0)
    assert len(set(loaded)) == 3
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        want = _normalized(conn, reference)
        # The comparison sees every table a park writes to, DBOS's included. (A turn that
        # hibernates at once records no DBOS step: its hibernate commit comes before any wait.)
        assert want["dbos.workflow_status"] and want["dbos.operation_outputs"] == []
        assert want["dbos.workflow_input"] and want["public.__agents_checkpoints"]
        for sid in loaded:
            assert _normalized(conn, sid) == want
        # Times moved as one: the deadline is as far from the park as the reference's.
        spans = conn.execute(
            "SELECT session_id, (metadata->'hibernated'->>'dueAt')::bigint"
            " - (metadata->'hibernated'->>'at')::bigint FROM __agents_states"
        ).fetchall()
    by_id: dict[str, int] = dict(spans)
    assert {sid: by_id[sid] for sid in loaded} == {sid: by_id[template_id] for sid in loaded}

    # The normal submit answers a loaded session; its continuation completes the turn.
    answered = loaded[0]
    state = await runtime.store.get(answered)
    (call,) = state.pending
    answer = await runtime.submit_tool_result(answered, call, result={"applied": 1})
    assert answer.status == "accepted", answer
    await _status(runtime, answered, "completed")

    # The keeper fires a loaded session whose deadline has passed, as it fires a real one.
    due = loaded[1]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE __agents_states SET pending_client_tool_calls = jsonb_set("
            "pending_client_tool_calls, ARRAY[%(call)s, 'deadlineAt'], to_jsonb(%(at)s::bigint)),"
            " metadata = jsonb_set(metadata, '{hibernated,dueAt}', to_jsonb(%(at)s::bigint)),"
            " version = version + 1 WHERE session_id = %(sid)s",
            {"call": next(iter((await runtime.store.get(due)).pending)), "at": 1, "sid": due},
        )
    await _status(runtime, due, "completed")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        fired = conn.execute(
            "SELECT count(*) FROM __agents_usage WHERE session_id = %s"
            " AND source_type = 'client_tool_timeout'",
            (due,),
        ).fetchone()
    assert fired == (1,)
