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

from helix_dbos.runtime import names, wake
from helix_dbos.store.schema import states
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
    assert wake.local_waiter(workflow_id, topic) is None  # the recv is gone once it returned


def test_dbos_is_imported_through_its_public_api_only() -> None:
    """No module imports a private DBOS module, except the one read guarded above."""
    package = Path(wake.__file__).resolve().parent.parent
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
    assert private == {"runtime/wake.py": ["dbos._dbos"]}


async def test_the_answer_is_written_before_its_wake_up_in_one_transaction(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wake-up message is enlisted in the answer's own transaction, after the answer: a
    woken turn always finds its answer, and no wake-up exists without one."""
    runtime = await make_runtime([editor_agent()])
    handle = await runtime.start("editor", "1 edit")
    [call] = await runtime.wait_for_pending(handle.session_id)
    client = runtime.ctx.client
    real = client.send_in_transaction
    seen: list[Any] = []

    def enlist(conn: Any, destination: str, message: Any, topic: str, key: str) -> Any:
        # ``conn`` is the answer's transaction: the answer must already be in it.
        row = conn.execute(
            sa.select(states.c.pending_client_tool_calls).where(
                states.c.session_id == handle.session_id
            )
        ).scalar_one()
        seen.append((row[call["toolCallId"]].get("submittedAt"), message))
        return real(conn, destination, message, topic, key)

    monkeypatch.setattr(client, "send_in_transaction", enlist)
    await runtime.submit_tool_result(handle.session_id, call["toolCallId"], result={"applied": 1})
    [(submitted_at, message)] = seen
    assert submitted_at is not None
    assert message == {
        "kind": "answer",
        "toolCallId": call["toolCallId"],
        "submittedAt": submitted_at,
    }
    assert (await runtime.wait(handle.session_id))["status"] == "completed"
