"""An MCP tool that asks (``input_required``), beyond one form: the real ``mcp`` SDK's server
over stdio, a real runtime on Postgres and SQLite.

A tool that asks, gets its answer and asks again (with new request state) parks the turn
again on the same call and completes once answered; an earlier round's key is answered
``already_completed`` by ``tasks/update``. A tool that asks only for a confirmation (one
boolean field) waits as an approval: it is in the approval inbox (``GET /approvals``), and
the inbox's answer (``approval-response`` through ``/submit-tool-result``, as the inbox page
sends it) calls the tool again with the confirmation, or denies it with a reason the model
reads and no second call.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fastapi import FastAPI

from helix_dbos.core.agents import define_agent
from helix_dbos.http import create_router
from helix_dbos.http.mcp_tasks import input_requests, request_key, submit_answers
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.runtime import AgentRuntime
from tests.mcp.conftest import Journal
from tests.mcp.scripted import files, script
from tests.support.asgi import client_for


async def _assistant(
    make_runtime: Any, journal: Journal, hibernate_after: float | None = None
) -> AgentRuntime:
    agent = define_agent(
        "assistant",
        llm=ScriptedLLM(script),
        tools=[files(journal)],
        hibernate_after=hibernate_after,
    )
    runtime: AgentRuntime = await make_runtime([agent])
    return runtime


@pytest.mark.parametrize("hibernate_after", [None, 0], ids=["live", "hibernated"])
async def test_a_tool_that_asks_again_parks_again_and_completes(
    make_runtime: Any, journal: Journal, hibernate_after: float | None
) -> None:
    """``survey`` asks a name, then (with the request state of its first answer) a colour:
    the turn parks on the call twice, each round a pending entry of its own round with its
    own form, and the model reads the third call's answer. The server saw each round's
    request state, as it returned it. The same when the turn hibernated on the first round:
    its continuation parks on the second (the row names the continuation, which the second
    answer wakes)."""
    rt = await _assistant(make_runtime, journal, hibernate_after)
    handle = await rt.start("assistant", json.dumps([["files__survey", {}]]))
    [first] = await rt.wait_for_pending(handle.session_id)
    if hibernate_after == 0:  # the hibernate commit lands just after the park
        for _ in range(200):
            if "hibernated" in (await rt.session(handle.session_id)).metadata:
                break
            await asyncio.sleep(0.05)
        assert "hibernated" in (await rt.session(handle.session_id)).metadata
    assert first["input"]["round"] == 1 and list(first["input"]["inputRequests"]) == ["name"]
    view = await rt.status(handle.session_id)
    assert request_key(first) == first["toolCallId"]
    assert list(await input_requests(rt, view)) == [first["toolCallId"]]
    answered = await rt.submit_tool_result(
        handle.session_id, first["toolCallId"], result={"name": "Ada"}
    )
    assert answered.status == "accepted"

    [second] = await rt.wait_for_pending(handle.session_id)
    assert second["toolCallId"] == first["toolCallId"] and second["input"]["round"] == 2
    assert "hibernated" not in (await rt.session(handle.session_id)).metadata
    form = second["input"]["inputRequests"]["colour"]
    assert form["params"]["message"] == "Favourite colour of Ada?"
    assert second["deadlineAt"] >= first["deadlineAt"]
    status = await rt.status(handle.session_id)
    assert status["status"] == "suspended_client_tool"
    # Over MCP the second round has a key of its own; the first round's is answered already.
    key = f"{first['toolCallId']}#2"
    assert list(await input_requests(rt, status)) == [key]
    stale = {first["toolCallId"]: {"action": "accept", "content": {"name": "Bob"}}}
    assert await submit_answers(rt, handle.session_id, status, stale) == {
        first["toolCallId"]: "already_completed"
    }
    fresh = {key: {"action": "accept", "content": {"colour": "green"}}}
    assert await submit_answers(rt, handle.session_id, status, fresh) == {key: "accepted"}

    view = await rt.wait(handle.session_id, timeout=60)
    assert view["status"] == "completed", view
    history = await rt.messages(handle.session_id)
    assert history[-1].content == 'ok: {"result": "Ada likes green"}'
    calls = journal.calls("survey")
    assert [(c["args"]["answered"], c["args"]["state"]) for c in calls] == [
        ([], ""),
        (["name"], "asked-name"),
        (["colour"], "asked-colour:Ada"),
    ]


async def test_a_confirmation_waits_in_the_approval_inbox_and_is_answered_from_there(
    make_runtime: Any, journal: Journal
) -> None:
    """``wipe`` asks one boolean: its call waits as an approval, listed by ``GET /approvals``
    with the tool's form; approved there, the tool is called again with the confirmation;
    denied with a reason, the model reads the denial and the tool is not called again."""
    rt = await _assistant(make_runtime, journal)
    app = FastAPI()
    app.include_router(create_router(rt, allow_unauthenticated=True, mcp=False))
    async with client_for(app) as http:
        for approved, read in (
            (True, 'ok: {"result": "wiped a.txt"}'),
            (False, "approval_denied: A human denied this call. Reason: not that one"),
        ):
            handle = await rt.start("assistant", json.dumps([["files__wipe", {"path": "a.txt"}]]))
            [pending] = await rt.wait_for_pending(handle.session_id)
            assert pending["kind"] == "approval" and pending["approvalId"]
            listed = (await http.get("/approvals", params={"sessionId": handle.session_id})).json()
            [item] = listed["approvals"]
            assert item["toolName"] == "files__wipe"
            assert item["toolCallId"] == pending["toolCallId"]
            assert item["approvalId"] == pending["approvalId"]
            form = item["input"]["inputRequests"]["really"]["params"]
            assert form["message"] == "Really wipe a.txt?"
            assert form["requestedSchema"]["properties"] == {"really": {"type": "boolean"}}
            assert item["input"]["arguments"] == {"path": "a.txt"}
            # The inbox page's answer: the approval, with the input it showed.
            body = {
                "kind": "approval-response",
                "sessionId": item["rootSessionId"],
                "toolCallId": item["toolCallId"],
                "approvalId": item["approvalId"],
                "approved": approved,
                "input": item["input"],
                **({} if approved else {"reason": "not that one"}),
            }
            answer = await http.post("/submit-tool-result", json=body)
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "accepted"
            assert (await handle.result())["text"] == read
            after = (await http.get("/approvals", params={"sessionId": handle.session_id})).json()
            assert after["approvals"] == []
    calls = journal.calls("wipe")
    assert [c["args"]["answered"] for c in calls] == [[], ["really"], []]
