"""The AG-UI endpoint through the ``ag-ui-protocol`` models, on Postgres and SQLite.

``create_router`` is embedded in a FastAPI app (httpx's ASGI transport), with session tokens
under ``/secure`` (and the chat router there, whose ``POST /chat/sessions`` hands a browser its
thread id and token). One launched runtime per backend serves the module: every test uses
threads of its own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio
from ag_ui.core import (
    ResumeEntry,
    RunFinishedCancelledOutcome,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    StateSnapshotEvent,
    Tool,
    ToolCallArgsEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from fastapi import FastAPI

from helix_dbos.config import HelixSettings
from helix_dbos.core.session import args_digest
from helix_dbos.errors import SessionNotFoundError
from helix_dbos.http import SessionTokens, create_router, install_error_handlers
from helix_dbos.http.chat import create_chat_router
from helix_dbos.runtime import AgentRuntime
from tests.conftest import create_pg_database, drop_pg_database

from .agents import assistant_agent
from .client import AguiThread, Run

pytestmark = pytest.mark.asyncio(loop_scope="module")

SECRET = "agui-tests-secret-0123456789abcdef-0123"
URL = "/agui/assistant"
EDIT = 'replace "teh" with "the"'


@dataclass
class Served:
    runtime: AgentRuntime
    http: httpx.AsyncClient
    tokens: SessionTokens

    def thread(self, **kw: Any) -> AguiThread:
        return AguiThread(self.http, kw.pop("url", URL), **kw)

    async def waiting(self, thread: AguiThread) -> list[dict[str, Any]]:
        view = await self.runtime.status(thread.thread_id)
        return [p for p in view["pendingToolCalls"] if "submittedAt" not in p]


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('agui') / 'helix.sqlite'}"
        return
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(database_url: str) -> AsyncIterator[Served]:
    settings = HelixSettings(
        database_url=database_url, executor_id="agui-tests", application_version="test"
    )
    runtime = AgentRuntime([assistant_agent()], settings)
    tokens = SessionTokens(SECRET, ttl_seconds=600)
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(create_router(runtime, allow_unauthenticated=True))
    auth, issue = tokens.authenticate, tokens.issue
    app.include_router(
        create_router(runtime, authenticate=auth, token_issuer=issue), prefix="/secure"
    )
    app.include_router(
        create_chat_router(runtime, agent_type="assistant", authenticate=auth, token_issuer=issue),
        prefix="/secure",
    )
    async with runtime:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://agui", timeout=30) as h:
            yield Served(runtime, h, tokens)
    # DBOS runs the loop's default executor and shuts it down with the runtime; the module's
    # loop serves the next backend's runtime too, so it gets a fresh one.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor())


async def client_tools(served: Served, prefix: str = "", **kw: Any) -> list[Tool]:
    response = await served.http.get(f"{prefix}{URL}/tools", **kw)
    assert response.status_code == 200, response.text
    return [Tool.model_validate(t) for t in response.json()]


def done(run: Run) -> list[Any]:
    """The tool results the assistant's last reply lists (``Done: <json> | <json>``)."""
    assert run.text.startswith("Done: "), run.text
    return [json.loads(part) for part in run.text.removeprefix("Done: ").split(" | ")]


def only(run: Run, kind: type[Any]) -> Any:
    [found] = run.of(kind)
    return found


async def test_client_tool_round_trip(served: Served) -> None:
    """A frontend tool call ends the run with pendingToolCallIds; the next run's tool message
    is the submit (an invalid one is refused and stores nothing) and streams the rest; the
    same input again stores nothing."""
    thread = served.thread(tools=await client_tools(served))
    assert [t.name for t in thread.tools] == ["editContent"]
    thread.say(EDIT)
    first = await thread.run()
    assert first.types == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    start = only(first, ToolCallStartEvent)
    assert (start.tool_call_name, start.metadata) == ("editContent", {"kind": "client"})
    args = json.loads(only(first, ToolCallArgsEvent).delta)
    assert args == {"edits": [{"selector": "teh", "replacement": "the"}]}
    assert first.outcome == RunFinishedSuccessOutcome(pending_tool_call_ids=[start.tool_call_id])
    helix = only(first, StateSnapshotEvent).snapshot["helix"]
    assert (helix["status"], helix["waitingFor"]) == ("suspended_client_tool", ["client_tool"])

    thread.answer(start.tool_call_id, {"applied": -1, "failed": 0})
    bad = await thread.run()
    assert bad.types == ["RUN_STARTED", "RUN_ERROR"]
    assert (bad.error.code, bad.error_meta["toolCallId"]) == (
        "INVALID_RESULT",
        start.tool_call_id,
    )
    assert [p["toolCallId"] for p in await served.waiting(thread)] == [start.tool_call_id]

    thread.messages.pop()
    thread.answer(start.tool_call_id, {"applied": 1, "failed": 0})
    second = await thread.run()
    assert done(second) == [{"applied": 1, "failed": 0}]
    assert second.outcome == RunFinishedSuccessOutcome()
    assert second.of(ToolCallResultEvent) == []  # the client has its own result

    stored = len(await served.runtime.messages(thread.thread_id))
    again = await thread.run(body=thread.last_body)
    assert again.types == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert again.outcome == RunFinishedSuccessOutcome()
    assert len(await served.runtime.messages(thread.thread_id)) == stored


@pytest.mark.parametrize(
    ("declared", "cause", "reason"),
    [
        (Tool(name="deleteEverything", description="x"), "client_tool_unknown", None),
        (
            Tool(name="publishDocument", description="x"),
            "client_tool_mismatch",
            "not_a_client_tool",
        ),
        (
            Tool(name="editContent", description="x", parameters={"properties": {"text": {}}}),
            "client_tool_mismatch",
            "parameters",
        ),
    ],
)
async def test_frontend_tools_are_checked_against_the_agents(
    served: Served, declared: Tool, cause: str, reason: str | None
) -> None:
    """A declared frontend tool that is not one of the agent's client tools, or declares other
    parameters, refuses the run before anything starts."""
    thread = served.thread(tools=[declared])
    thread.say(EDIT)
    run = await thread.run()
    assert run.types == ["RUN_STARTED", "RUN_ERROR"]
    assert (run.error.code, run.error_meta["cause"]) == ("validation_error", cause)
    assert run.error_meta.get("reason") == reason
    with pytest.raises(SessionNotFoundError):
        await served.runtime.session(thread.thread_id)


async def park_on_approval(served: Served) -> tuple[AguiThread, Any]:
    thread = served.thread()
    thread.say("publish")
    first = await thread.run()
    assert isinstance(first.outcome, RunFinishedInterruptOutcome), first.outcome
    [interrupt] = first.outcome.interrupts
    start = only(first, ToolCallStartEvent)
    assert (start.tool_call_name, start.metadata) == ("publishDocument", {"kind": "approval"})
    return thread, interrupt


async def test_approval_interrupt_then_approved(served: Served) -> None:
    """An approval ends the run with an interrupt (our approval id; the tool, its arguments
    and their digest); a resume approving it runs the tool and streams the rest."""
    thread, interrupt = await park_on_approval(served)
    [pending] = await served.waiting(thread)
    assert (interrupt.id, interrupt.tool_call_id) == (pending["approvalId"], pending["toolCallId"])
    assert interrupt.reason == "tool_call"
    assert interrupt.response_schema["required"] == ["approved"]
    meta = interrupt.metadata
    assert (meta["toolName"], meta["args"]) == ("publishDocument", {"documentId": "doc-1"})
    assert meta["argsDigest"] == args_digest("publishDocument", {"documentId": "doc-1"})

    payload = {"approved": True, "argsDigest": meta["argsDigest"]}
    second = await thread.run(
        [ResumeEntry(interrupt_id=interrupt.id, status="resolved", payload=payload)]
    )
    result = only(second, ToolCallResultEvent)
    assert result.tool_call_id == interrupt.tool_call_id
    assert json.loads(result.content) == {
        "published": True,
        "url": "https://docs.example.com/doc-1",
    }
    assert second.text.startswith("Done: ")
    assert second.outcome == RunFinishedSuccessOutcome()


@pytest.mark.parametrize("status", ["resolved", "cancelled"])
async def test_approval_denied_with_a_reason(served: Served, status: str) -> None:
    """A denial (``approved: false``, or a cancelled entry) with a reason: the tool never runs
    and the reason reaches the model."""
    thread, interrupt = await park_on_approval(served)
    payload: dict[str, Any] = {"reason": "not before Monday"}
    if status == "resolved":
        payload["approved"] = False
    entry = ResumeEntry(interrupt_id=interrupt.id, status=status, payload=payload)
    run = await thread.run([entry])
    result = only(run, ToolCallResultEvent)
    assert result.metadata == {"errorCode": "approval_denied"}
    assert "not before Monday" in result.content
    assert "not before Monday" in run.text
    assert run.outcome == RunFinishedSuccessOutcome()


async def test_repeated_stale_and_foreign_resumes_are_refused(served: Served) -> None:
    """A repeated resume (already_completed), one for a stopped run (run_stopped), one naming
    another run's approval of the call (approval_mismatch) or nothing at all
    (unknown_tool_call): each is RUN_ERROR and stores nothing."""
    thread, interrupt = await park_on_approval(served)
    approve = [
        ResumeEntry(interrupt_id=interrupt.id, status="resolved", payload={"approved": True})
    ]
    await thread.run(approve)
    stored = await served.runtime.messages(thread.thread_id)
    again = await thread.run(approve)
    assert again.types == ["RUN_STARTED", "RUN_ERROR"]
    assert (again.error.code, again.error_meta["interruptId"]) == (
        "already_completed",
        interrupt.id,
    )
    after = await served.runtime.messages(thread.thread_id)
    assert len(after) == len(stored)
    assert [m.tool_name for m in after if m.role == "tool"] == ["publishDocument"]

    other, pending = await park_on_approval(served)
    foreign = f"run_other::{pending.tool_call_id}"
    for interrupt_id, code in ((foreign, "approval_mismatch"), ("nope", "unknown_tool_call")):
        entry = ResumeEntry(
            interrupt_id=interrupt_id, status="resolved", payload={"approved": True}
        )
        refused = await other.run([entry])
        assert refused.error.code == code, refused.error
        assert [p["toolCallId"] for p in await served.waiting(other)] == [pending.tool_call_id]
    await served.runtime.interrupt(other.thread_id)
    entry = ResumeEntry(interrupt_id=pending.id, status="resolved", payload={"approved": True})
    stopped = await other.run([entry])
    assert (stopped.error.code, stopped.error_meta["reason"]) == ("run_stopped", "run_stopped")


async def test_a_batch_of_two_client_calls_answered_one_at_a_time(served: Served) -> None:
    """Two frontend calls in one step: the first answer finishes a run that names the call
    still awaited; the second continues the turn."""
    thread = served.thread()
    thread.say('replace "a" with "b" and replace "c" with "d" separately')
    first = await thread.run()
    ids = [e.tool_call_id for e in first.of(ToolCallStartEvent)]
    assert len(ids) == 2
    assert first.outcome == RunFinishedSuccessOutcome(pending_tool_call_ids=ids)

    thread.answer(ids[0], {"applied": 1, "failed": 0})
    partial = await thread.run()
    assert partial.types == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert partial.outcome == RunFinishedSuccessOutcome(pending_tool_call_ids=[ids[1]])
    assert partial.last.metadata == {"continuation": "awaiting_batch"}

    thread.answer(ids[1], {"applied": 0, "failed": 1})
    rest = await thread.run()
    assert done(rest) == [{"applied": 1, "failed": 0}, {"applied": 0, "failed": 1}]
    assert rest.outcome == RunFinishedSuccessOutcome()


async def test_reconnect_gets_the_pending_interrupt_again(served: Served) -> None:
    """A run with nothing new on a parked thread replays its interrupt: to a reloaded client
    (no history) with the call, to one that has the call without it; then the resume works."""
    thread, interrupt = await park_on_approval(served)
    reloaded = served.thread(thread_id=thread.thread_id)
    replay = await reloaded.run()
    assert replay.types == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    assert replay.outcome.interrupts == [interrupt]
    again = await thread.run()  # the same client, which has the call and its user message
    assert again.types == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert again.outcome.interrupts == [interrupt]
    kept = served.thread(thread_id=thread.thread_id)  # a reload that kept only its message
    kept.say("publish")
    resent = await kept.run()
    assert resent.types == replay.types and resent.outcome.interrupts == [interrupt]
    entry = ResumeEntry(interrupt_id=interrupt.id, status="resolved", payload={"approved": True})
    done = await reloaded.run([entry])
    assert done.outcome == RunFinishedSuccessOutcome()


async def test_auth_on_thread_and_token_from_chat_sessions(served: Served) -> None:
    """With session tokens, a browser gets its thread id and token from POST /chat/sessions
    and sends Authorization: Bearer; none is 401, another thread's token is 403."""
    made = (await served.http.post("/secure/chat/sessions")).json()
    bearer = {"Authorization": f"Bearer {made['token']}"}
    tools = await client_tools(served, "/secure", headers=bearer)
    thread = served.thread(url=f"/secure{URL}", thread_id=made["id"], headers=bearer, tools=tools)
    thread.say(EDIT)
    first = await thread.run()
    [call_id] = first.outcome.pending_tool_call_ids

    for headers, status in (
        ({}, 401),
        ({"Authorization": f"Bearer {served.tokens.issue('x')}"}, 403),
    ):
        refused = await served.http.post(f"/secure{URL}", json=thread.body(), headers=headers)
        assert refused.status_code == status, refused.text
        assert refused.json()["code"] in ("unauthorized", "forbidden")
    assert (await served.http.get(f"/secure{URL}/tools")).status_code == 401

    thread.answer(call_id, {"applied": 1, "failed": 0})
    done = await thread.run()
    assert done.outcome == RunFinishedSuccessOutcome()


@pytest.mark.parametrize("stop", ["interrupt", "abort"])
async def test_a_stopped_turn_ends_its_run_cancelled(served: Served, stop: str) -> None:
    """Interrupt and abort: the open run finishes with the cancelled outcome."""
    thread = served.thread()
    thread.say("slowly, please")
    running = asyncio.create_task(thread.run())
    for _ in range(500):  # the run's request has started the turn: the session exists
        try:
            await served.runtime.session(thread.thread_id)
            break
        except SessionNotFoundError:
            await asyncio.sleep(0.02)
    view = await served.runtime.status(thread.thread_id)
    assert view["status"] == "running"  # in the slow model call
    await getattr(served.runtime, stop)(thread.thread_id)
    run = await asyncio.wait_for(running, 20)
    assert run.outcome == RunFinishedCancelledOutcome()


async def test_server_tools_subagents_failures_and_busy_threads(served: Served) -> None:
    """Server tools and sub-agents stream their calls and results; a failed turn is RUN_ERROR
    with its code; a second message while the thread waits is refused."""
    thread = served.thread()
    thread.say("look up ocean")
    looked = await thread.run()
    assert only(looked, ToolCallStartEvent).metadata == {"kind": "server"}
    assert json.loads(only(looked, ToolCallResultEvent).content) == {"word": "ocean", "length": 5}
    thread.say("ask the speller")
    asked = await thread.run()
    assert only(asked, ToolCallStartEvent).metadata == {"kind": "subagent"}
    assert "s-p-e-l-l-e-d" in only(asked, ToolCallResultEvent).content
    thread.say("please fail")
    failed = await thread.run()
    assert failed.error.code == "provider_bad_request"

    parked, _ = await park_on_approval(served)
    parked.say("something else")
    busy = await parked.run()
    assert busy.types == ["RUN_STARTED", "RUN_ERROR"]
    assert busy.error.code == "state_already_running"


async def test_a_sub_agents_client_call_is_surfaced_and_answered_on_the_thread(
    served: Served,
) -> None:
    """A sub-agent's frontend call ends the thread's run like the agent's own; its answer on
    the thread is routed to the sub-agent, and the run streams both turns' rest."""
    thread = served.thread()
    thread.say("ask the helper")
    # On Postgres the run ends when the sub-agent's events wake the thread's stream.
    first = await asyncio.wait_for(thread.run(), 20)
    delegate, edit = first.of(ToolCallStartEvent)
    assert (delegate.tool_call_name, delegate.metadata) == (
        "subagent__helper",
        {"kind": "subagent"},
    )
    assert (edit.tool_call_name, edit.metadata) == ("editContent", {"kind": "client"})
    assert first.outcome == RunFinishedSuccessOutcome(pending_tool_call_ids=[edit.tool_call_id])
    [pending] = await served.waiting(thread)
    assert pending["ownerSessionId"] != thread.thread_id  # the sub-agent's call

    thread.answer(edit.tool_call_id, {"applied": 1, "failed": 0})
    rest = await thread.run()
    result = only(rest, ToolCallResultEvent)
    assert result.tool_call_id == delegate.tool_call_id
    assert "helped: " in result.content
    assert rest.text.startswith("Done: ") and rest.outcome == RunFinishedSuccessOutcome()


async def test_what_is_not_a_run_is_an_http_answer(served: Served) -> None:
    """A body that is not a RunAgentInput, an invalid thread id, an unknown agent: typed HTTP
    answers, no stream; a thread of another agent is a refused run."""
    thread = served.thread()
    thread.say("hello")
    body = thread.body()
    cases = [
        ({"threadId": "t1"}, URL, 400, "validation_error"),
        ({**body, "threadId": "a\tb"}, URL, 400, "validation_error"),
        ({**body, "threadId": "x" * 257}, URL, 400, "validation_error"),
        (body, "/agui/nobody", 404, "framework_agent_not_found"),
    ]
    for sent, url, status, code in cases:
        answer = await served.http.post(url, json=sent)
        assert answer.status_code == status, (url, answer.status_code, answer.text)
        assert answer.json()["code"] == code
    # A refused body names the field: a run without its required runId, a thread id of
    # the wrong type.
    missing = await served.http.post(URL, json={k: v for k, v in body.items() if k != "runId"})
    assert (missing.status_code, missing.json()["cause"]) == (400, "schema"), missing.text
    assert missing.json()["field"] == "runId"
    assert {"field": "runId", "problem": "missing"} in missing.json()["fields"]
    wrong = await served.http.post(URL, json={**body, "threadId": 7})
    assert wrong.json()["field"] == "threadId", wrong.text
    await thread.run()
    other = served.thread(url="/agui/speller", thread_id=thread.thread_id)
    other.say("hello")
    refused = await other.run()
    assert (refused.error.code, refused.error_meta["cause"]) == ("validation_error", "thread_agent")
