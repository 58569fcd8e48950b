"""What a client sees of an MCP tool's question (``input_required``): the real ``mcp`` SDK's
server over stdio, a real runtime on Postgres and SQLite, the app's routes in this process.

A call parked on a tool's form shows its deadline and the form (message and schema) in
``/status``, the AI SDK chat stream (``tool-input-available`` and a ``data-input-request``
part), AG-UI (the call's arguments, ``CUSTOM helix.input_request``, the state snapshot's
deadline) and ``helix-dbos inspect``; a confirmation, waiting as an approval, is AG-UI's
interrupt with the tool's own message and the call's deadline.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ag_ui.core import CustomEvent, RunFinishedEvent, StateSnapshotEvent, ToolCallArgsEvent
from fastapi import FastAPI

from helix_dbos.core.agents import define_agent
from helix_dbos.http import create_chat_router, create_router, install_error_handlers
from helix_dbos.llm.scripted import ScriptedLLM
from tests.agui.client import AguiThread
from tests.mcp.conftest import Journal
from tests.mcp.scripted import files, script
from tests.serve.streams import chunks_of, user
from tests.support.asgi import client_for
from tests.support.inspect_cli import cli

CONFIRM = json.dumps([["files__confirm", {}]])
WIPE = json.dumps([["files__wipe", {"path": "a.txt"}]])
SURE = {"type": "object", "properties": {"ok": {"type": "boolean"}, "note": {"type": "string"}}}


def _app(rt: Any) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(create_router(rt, allow_unauthenticated=True, mcp=False))
    app.include_router(create_chat_router(rt, agent_type="assistant", allow_unauthenticated=True))
    return app


def _form_of(inputs: Any) -> dict[str, Any]:
    [(key, request)] = inputs["inputRequests"].items()
    assert key == "sure" and request["method"] == "elicitation/create"
    return dict(request["params"])


async def test_a_form_is_shown_with_its_deadline_everywhere(
    make_runtime: Any, journal: Journal, db_url: str
) -> None:
    agent = define_agent("assistant", llm=ScriptedLLM(script), tools=[files(journal)])
    rt = await make_runtime([agent])
    async with client_for(_app(rt)) as http:
        # AG-UI: the run that parks on the form.
        thread = AguiThread(http, "/agui/assistant")
        thread.say(CONFIRM)
        run = await thread.run()
        session_id = thread.thread_id
        [pending] = await rt.wait_for_pending(session_id)
        deadline = pending["deadlineAt"]
        [args] = run.of(ToolCallArgsEvent)  # one call, started once: its arguments
        assert (args.tool_call_id, json.loads(args.delta)) == (pending["toolCallId"], {})
        [asked] = [e for e in run.of(CustomEvent) if e.name == "helix.input_request"]
        assert asked.value["deadlineAt"] == deadline
        assert asked.value["toolCallId"] == pending["toolCallId"]
        assert _form_of(asked.value)["message"] == "Sure?"
        [snapshot] = run.of(StateSnapshotEvent)
        [waiting] = snapshot.snapshot["helix"]["pendingToolCalls"]
        assert (waiting["deadlineAt"], waiting["kind"]) == (deadline, "client")

        # /status: the pending call, its deadline and the form.
        status = (await http.get("/status", params={"sessionId": session_id})).json()
        [call] = status["pendingToolCalls"]
        assert (call["deadlineAt"], call["kind"], call["input"]["round"]) == (deadline, "client", 1)
        assert _form_of(call["input"])["requestedSchema"] == SURE

        # The AI SDK chat stream of a chat parked on the same form.
        body = {"id": "chat-asks", "messages": [user(CONFIRM)], "trigger": "submit-message"}
        streamed = await http.post("/chat", json=body)
        assert streamed.status_code == 200, streamed.text
        chunks = chunks_of(streamed.text)
        # The server's call, then the same call again: now the client's, with the form.
        ran, tool = [c for c in chunks if c["type"] == "tool-input-available"]
        assert ran["toolCallId"] == tool["toolCallId"] and ran["providerExecuted"] is True
        assert "providerExecuted" not in tool, "the client answers it"
        assert _form_of(tool["input"])["message"] == "Sure?"
        [part] = [c for c in chunks if c["type"] == "data-input-request"]
        [chat_call] = await rt.wait_for_pending("chat-asks")
        assert part["data"]["deadlineAt"] == chat_call["deadlineAt"]
        assert _form_of(part["data"])["requestedSchema"] == SURE

    # helix-dbos inspect: the call, its deadline, and the form's message and schema.
    code, out, _ = await cli("inspect", session_id, "--database-url", db_url)
    assert code == 0, out
    when = datetime.fromtimestamp(deadline / 1000, UTC).isoformat(timespec="seconds")
    assert f"deadline {when}" in out
    assert "asks (round 1), with arguments {}" in out
    assert f"sure: 'Sure?'  schema {json.dumps(SURE, sort_keys=True)}" in out


async def test_a_confirmation_is_an_ag_ui_interrupt_with_the_tools_message(
    make_runtime: Any, journal: Journal
) -> None:
    agent = define_agent("assistant", llm=ScriptedLLM(script), tools=[files(journal)])
    rt = await make_runtime([agent])
    async with client_for(_app(rt)) as http:
        thread = AguiThread(http, "/agui/assistant")
        thread.say(WIPE)
        run = await thread.run()
        [pending] = await rt.wait_for_pending(thread.thread_id)
        assert isinstance(run.last, RunFinishedEvent)
        [interrupt] = run.outcome.interrupts
        assert interrupt.message == "Really wipe a.txt?"
        assert interrupt.id == pending["approvalId"]
        expires = datetime.fromisoformat(interrupt.expires_at.replace("Z", "+00:00"))
        assert int(expires.timestamp() * 1000) == pending["deadlineAt"]
        [asked] = [e for e in run.of(CustomEvent) if e.name == "helix.input_request"]
        assert asked.value["inputRequests"]["really"]["params"]["message"] == "Really wipe a.txt?"
