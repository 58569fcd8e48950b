"""The in-process wake-up reads DBOS internals: this test notices when DBOS changes them.

``wake.wake_local`` signals a ``recv`` parked in this process straight after an answer commits
(saving the NOTIFY round trip, or a polling interval on SQLite). DBOS has no public API for
it, so it reads the system database's map of waiting ``recv`` calls. If DBOS renames the map,
changes its key or its signal, ``wake_local`` quietly does nothing (the durable path still
wakes the turn, only later): this test is what fails.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from helix_dbos.runtime import names
from helix_dbos.runtime._turn import wake
from helix_dbos.runtime.records import TurnMessage
from helix_dbos.store import dbos_messages, pg
from helix_dbos.store.schema import states
from tests.psycopg_probe import record_task_statements
from tests.runtime.agents import editor_agent
from tests.runtime.conftest import MakeRuntime


async def test_wake_local_finds_a_parked_recv(make_runtime: MakeRuntime) -> None:
    """A parked turn's recv is found by workflow id and topic; an answer then completes it."""
    runtime = await make_runtime([editor_agent()])
    handle = await runtime.start("editor", "1 edit")
    [call] = await runtime.wait_for_pending(handle.session_id)
    workflow_id = names.turn_workflow_id(handle.session_id, handle.run_id)
    topic = names.tool_result_topic(call["toolCallId"])

    # The pending entry commits in the model step, before the recv registers: wait for it.
    # Generous: the bound only limits a failing run, never a passing one.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    signal = wake.local_waiter(workflow_id, topic)
    while signal is None and loop.time() < deadline:
        await asyncio.sleep(0.02)
        signal = wake.local_waiter(workflow_id, topic)
    assert signal is not None, "DBOS no longer exposes parked recv calls where wake_local looks"
    assert callable(getattr(signal, "set", None))
    assert wake.local_waiter(workflow_id, "no-such-topic") is None
    assert wake.wake_local(workflow_id, "no-such-topic") is False

    await runtime.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
    view = await runtime.wait(handle.session_id)
    assert view["status"] == "completed"
    # The recv is gone once it returned. On Postgres the submit's early continuation may
    # complete the session before DBOS hands the turn its wake-up: wait for the recv too.
    deadline = loop.time() + 60
    while wake.local_waiter(workflow_id, topic) is not None and loop.time() < deadline:
        await asyncio.sleep(0.02)
    assert wake.local_waiter(workflow_id, topic) is None


def test_dbos_is_imported_through_its_public_api_only() -> None:
    """No module imports a private DBOS module, except the one read guarded above."""
    package = Path(wake.__file__).resolve().parents[2]
    private: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            hits = [n for n in names if n.startswith("dbos.") and n.split(".")[1].startswith("_")]
            if hits:
                private.setdefault(str(path.relative_to(package)), []).extend(hits)
    assert private == {"runtime/_turn/wake.py": ["dbos._dbos"]}


async def test_the_answer_is_written_before_its_wake_up_in_one_transaction(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wake-up message is enlisted in the answer's own transaction, with the answer: a
    woken turn always finds its answer, and no wake-up exists without one."""
    runtime = await make_runtime([editor_agent()])
    handle = await runtime.start("editor", "1 edit")
    [call] = await runtime.wait_for_pending(handle.session_id)
    real = wake.enlist
    seen: list[Any] = []

    topic = names.tool_result_topic(call["toolCallId"])

    async def enlist(ctx: Any, destination: str, message: Any, *rest: Any) -> None:
        await real(ctx, destination, message, *rest)
        # The answer's unit of work: the answer and the message are both in it.
        conn: Any = runtime.store.bound()
        if runtime.store.dialect == "postgresql":
            # A lean transaction (``pg.LeanTransaction``): only ``pg``'s statements run on it.
            [(stored,)] = await pg.fetch(
                conn,
                "SELECT pending_client_tool_calls FROM __agents_states WHERE session_id = %s",
                (handle.session_id,),
            )
            [(queued,)] = await pg.fetch(
                conn,
                "SELECT count(*) FROM dbos.notifications WHERE destination_uuid = %s"
                " AND topic = %s",
                (destination, topic),
            )
        else:
            stored = (
                await conn.execute(
                    sa.select(states.c.pending_client_tool_calls).where(
                        states.c.session_id == handle.session_id
                    )
                )
            ).scalar_one()
            queued = (
                await conn.execute(
                    sa.text(
                        "SELECT count(*) FROM notifications WHERE destination_uuid = :d"
                        " AND topic = :t"
                    ),
                    {"d": destination, "t": topic},
                )
            ).scalar_one()
        seen.append((stored[call["toolCallId"]].get("submittedAt"), message, queued))

    monkeypatch.setattr(wake, "enlist", enlist)
    await runtime.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
    [(submitted_at, message, queued)] = seen
    assert submitted_at is not None
    assert queued == 1
    assert message == {
        "kind": "answer",
        "toolCallId": call["toolCallId"],
        "submittedAt": submitted_at,
    }
    assert (await runtime.wait(handle.session_id))["status"] == "completed"


NOTIFICATION_COLUMNS = (
    "destination_uuid, topic, message, message_uuid, serialization, consumed, "
    "consumed_by_function_id"
)


async def test_an_enlisted_message_is_the_row_dbos_writes(
    make_runtime: MakeRuntime, db_url: str
) -> None:
    """On Postgres the message rides in the store's own statement (``WriteBatch.notify``),
    not through ``DBOSClient.send_in_transaction``: its row must be the one DBOS's client
    writes for the same message (portable JSON, the key suffixed with the workflow id), so
    DBOS's ``recv`` reads it as its own, and a second one with the same key is dropped."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite enlists through DBOS's own client")
    from dbos import WorkflowSerializationFormat

    runtime = await make_runtime([editor_agent()])
    handle = await runtime.start("editor", "1 edit")
    await runtime.wait_for_pending(handle.session_id)
    workflow_id = names.turn_workflow_id(handle.session_id, handle.run_id)
    message: TurnMessage = {"kind": "answer", "toolCallId": "tc-é", "submittedAt": 12}
    store, client = runtime.ctx.store, runtime.ctx.client

    async def ours() -> None:
        for _ in range(2):  # the same key twice: one row
            await wake.enlist(runtime.ctx, workflow_id, message, "probe", "key")

    async def dbos() -> None:
        conn = store.bound()
        assert conn is not None
        await conn.run_sync(
            lambda sync: client.send_in_transaction(
                sync,
                workflow_id,
                message,
                "probe",
                "key2",
                serialization_type=WorkflowSerializationFormat.PORTABLE,
            )
        )

    await store.transact(ours)
    await store.transact(dbos)
    async with store.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.text(
                    f"SELECT {NOTIFICATION_COLUMNS} FROM dbos.notifications"
                    " WHERE topic = 'probe' ORDER BY message_uuid"
                )
            )
        ).all()
    assert [r.message_uuid for r in rows] == [f"key2::{workflow_id}", f"key::{workflow_id}"]
    theirs, mine = ({k: v for k, v in r._mapping.items() if k != "message_uuid"} for r in rows)
    assert mine == theirs
    assert mine["serialization"] == dbos_messages.PORTABLE_JSON


async def test_a_submit_is_one_read_and_one_statement_on_postgres(
    make_runtime: MakeRuntime, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submit reads the root's row once, then the answer, the row's compare-and-swap and the
    wake-up message go out as one statement, with no transaction around it (no BEGIN, no
    COMMIT). The turn then completes on that message."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite sends each write on its own")
    runtime = await make_runtime([editor_agent()])
    handle = await runtime.start("editor", "1 edit")
    [call] = await runtime.wait_for_pending(handle.session_id)
    workflow_id = names.turn_workflow_id(handle.session_id, handle.run_id)
    # The turn parks after its pending entry commits: wait until it does, so that only the
    # submit's own statements are counted below.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while workflow_id not in runtime.ctx.parked and loop.time() < deadline:
        await asyncio.sleep(0.02)
    with pytest.MonkeyPatch.context() as watching:
        sent, commands = record_task_statements(watching)
        answer = await runtime.submit_tool_result(
            handle.session_id, call["toolCallId"], result={"applied": 1}
        )
    assert answer.status == "accepted"
    assert len(sent) == 2, sent
    assert "__agents_states" in sent[0] and "FOR UPDATE" not in sent[0]
    assert "cas_states" in sent[1] and "dbos.notifications" in sent[1]
    assert commands == []
    assert (await runtime.wait(handle.session_id))["status"] == "completed"


async def test_answers_racing_on_one_row_are_each_stored_once(
    make_runtime: MakeRuntime,
) -> None:
    """The answers of one batch, submitted at once, swap the same row from the same read:
    all but one lose their swap and run again on the locked row; every answer is stored once
    and the turn continues once, with all of them."""
    runtime = await make_runtime([editor_agent()])
    handle = await runtime.start("editor", "4 edits")
    calls = await runtime.wait_for_pending(handle.session_id)
    answers = await asyncio.gather(
        *(
            runtime.submit_tool_result(handle.session_id, c["toolCallId"], result={"applied": i})
            for i, c in enumerate(calls)
        )
    )
    assert [a.status for a in answers] == ["accepted"] * 4
    assert (
        sum(a.continuation is not None and a.continuation.kind == "new_run" for a in answers) == 1
    )
    view = await runtime.wait(handle.session_id)
    assert view["status"] == "completed"
    tool = [m for m in await runtime.messages(handle.session_id) if m.role == "tool"]
    assert sorted(m.result["applied"] for m in tool if m.result) == [0, 1, 2, 3]
