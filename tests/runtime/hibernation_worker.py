"""Agents and helpers of the hibernation tests, and a child process for their crash tests.

Agents (the tests use them too): ``cold`` hibernates at once (``hibernate_after=0``),
``hot`` never hibernates, ``quick`` hibernates at once and its calls lapse after
``QUICK_TIMEOUT`` seconds. Their model (``script``): a user message ``"N ..."`` calls the
client tool ``edit`` N times in one step (``"N+M ..."``: N, then M in a second step), any
other user message is echoed; once the last batch has its results, it replies with what it
saw (each result's error code, else its content). ``mixed_script``, ``delegate_script`` and
``pay_script`` are the models of the tests' own agents (a batch mixing a server tool with client
calls, a parent of a sub-agent, an approval). The helpers read what the tests assert:
continuation workflows, tool results, usage rows, hibernation marks.

Modes (``python hibernation_worker.py MODE URL ...``); each prints one JSON line per session
``{session, agent, calls, workflow}`` once its turn is hibernated (``cold``, ``quick``) or
parked live (``hot``), then as documented:

``park URL VERSION AGENT[@LAYOUT]:MESSAGE...``: then ``parked``; waits to be killed, or,
    when its stdin closes, shuts down cleanly and exits 0 (a rolling deploy's stop). A turn
    given a LAYOUT records it, as a process of that contract would have (``names.TURN_LAYOUT``;
    one before this release's parks live).
``exit-at-hibernate URL``: one ``cold`` turn of two calls; the process dies
    (``os._exit(EXIT_AT_HIBERNATE)``) right after the hibernate commit, before the turn's
    workflow records its end; it prints ``{session, agent, workflow}`` first.
``exit-at-start URL``: one ``cold`` turn of two calls; answers both itself, and the process
    dies (``os._exit(EXIT_AT_START)``) as the last submit would start the continuation, after
    its commit. Its deadline keeper is off, so nothing else starts it here.
``kill-in-continuation URL``: one ``cold`` turn of two calls; answers both itself, then
    prints ``continuing`` once the continuation's model call has begun (it never answers),
    and waits to be killed.

Every mode runs with executor ``EXECUTOR`` and version ``VERSION`` (``park``: the VERSION it
is given), as the test's restarted runtime does (``settings``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import sqlalchemy as sa
from dbos import DBOS
from pydantic import BaseModel, Field

from helix_dbos.config import HelixSettings
from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.agents import Agent
from helix_dbos.core.llm import LLMRequest, LLMResponse, TextSink
from helix_dbos.core.tools import Tool
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from helix_dbos.observability import metrics
from helix_dbos.runtime import AgentRuntime, names

EXECUTOR = "hibernation-exec"
VERSION = "hibernation-1"
EXIT_AT_START = 17
"""The exit status of ``exit-at-start``: the process died where the continuation starts."""
EXIT_AT_HIBERNATE = 18
"""The exit status of ``exit-at-hibernate``: the process died after the hibernate commit."""
QUICK_TIMEOUT = 4.0
"""Seconds a ``quick`` call waits: long enough for a process to start it and hibernate."""
LONG_TIMEOUT = 300.0
CURRENT_LAYOUT = names.TURN_LAYOUT
"""The layout this release's turns record (a turn of an earlier one never hibernates)."""


class EditIn(BaseModel):
    text: str


class EditOut(BaseModel):
    applied: int = Field(ge=0)


def _batches(content: str) -> list[int]:
    """``"2+1 edits"`` -> ``[2, 1]``; a message that does not start with a count -> ``[]``."""
    head = content.split()[0] if content.split() else ""
    parts = head.split("+")
    return [int(p) for p in parts] if all(p.isdigit() for p in parts) else []


def script(request: LLMRequest) -> LLMResponse:
    """The model of every agent here (see the module's docstring)."""
    messages = request.messages
    last_user = max(i for i, m in enumerate(messages) if m.role == "user")
    batches = _batches(messages[last_user].content)
    done = sum(1 for m in messages[last_user:] if m.role == "assistant" and m.tool_calls)
    if messages[-1].role == "user" and not batches:
        return reply(f"echo: {messages[-1].content}")
    if done < len(batches) and messages[-1].role in ("user", "tool"):
        return call(
            request, *[("edit", {"text": f"edit-{done}-{i}"}) for i in range(batches[done])]
        )
    seen = [m for m in messages if m.role == "tool"]
    return reply("results: " + " | ".join(m.error_code or m.content for m in seen))


class Query(BaseModel):
    key: str


def mixed_script(request: LLMRequest) -> LLMResponse:
    """A user message calls, in one step, the server tool ``lookup``, the client tool ``edit``,
    and ``edit`` with invalid arguments; then replies with every result it saw."""
    if request.messages[-1].role == "user":
        calls: list[tuple[str, dict[str, Any]]] = [
            ("lookup", {"key": "k"}),
            ("edit", {"text": "t"}),
            ("edit", {"wrong": 1}),
        ]
        return call(request, *calls)
    seen = [m for m in request.messages if m.role == "tool"]
    return reply(" | ".join(m.error_code or m.content for m in seen))


def delegate_script(request: LLMRequest) -> LLMResponse:
    """A user message asks the sub-agent ``cold`` for one edit; its result is echoed."""
    if request.messages[-1].role == "user":
        return call(request, ("subagent__cold", {"message": "1 edit"}))
    return reply(f"done: {request.messages[-1].content}")


class Transfer(BaseModel):
    amount: int
    to: str


ARGS = {"amount": 40, "to": "alice"}


def pay_script(request: LLMRequest) -> LLMResponse:
    """A user message calls the gated ``transfer``; its result is echoed back."""
    last = request.messages[-1]
    if last.role == "user":
        return call(request, ("transfer", ARGS))
    return reply(f"{last.error_code or 'ok'}: {last.content}")


def edit_tool(timeout: float) -> Tool:
    """The client tool ``edit``; its calls wait ``timeout`` seconds."""
    return define_tool(
        "edit", "Apply an edit", EditIn, EditOut, execute="client", client_tool_timeout=timeout
    )


def agent(
    name: str,
    llm: Any = None,
    *,
    hibernate_after: float | Literal["never"] = 0,
    timeout: float = LONG_TIMEOUT,
) -> Agent:
    """An agent with the client tool ``edit`` and ``script``'s model."""
    return define_agent(
        name,
        llm=llm or ScriptedLLM(script),
        instructions="Edit documents.",
        tools=[edit_tool(timeout)],
        hibernate_after=hibernate_after,
    )


def agents(llm: Any = None) -> list[Agent]:
    """``cold``, ``hot`` and ``quick``, sharing one model."""
    llm = llm or ScriptedLLM(script)
    return [
        agent("cold", llm),
        agent("hot", llm, hibernate_after="never"),
        agent("quick", llm, timeout=QUICK_TIMEOUT),
    ]


def settings(
    url: str, version: str = VERSION, executor: str = EXECUTOR, keeper: float = 0.2
) -> HelixSettings:
    """A process's settings; ``keeper``: its deadline keeper's interval (``0``: off)."""
    return HelixSettings(
        database_url=url,
        executor_id=executor,
        application_version=version,
        deadline_keeper_seconds=keeper,
    )


class HangingLLM:
    """``script``'s model whose calls after the first never answer; ``hung`` is set when one
    has begun."""

    def __init__(self) -> None:
        self.inner = ScriptedLLM(script)
        self.name = self.inner.name
        self.hung = asyncio.Event()

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        if self.inner.calls >= 1:
            self.hung.set()
            await asyncio.Event().wait()
        return await self.inner.complete(request, on_text)


async def continuations(session_id: str) -> list[Any]:
    """The session's continuation workflows (``helix.turn.continue``), as DBOS lists them."""
    return await DBOS.list_workflows_async(
        name=names.CONTINUE_WORKFLOW,
        workflow_id_prefix=f"helix:{session_id}:",
        load_input=False,
        load_output=False,
    )


async def workflow_result(workflow_id: str | None) -> Any:
    """The result of a workflow, once it has ended."""
    handle: Any = await DBOS.retrieve_workflow_async(workflow_id or "")
    return await handle.get_result()


async def tool_results(runtime: AgentRuntime, session_id: str) -> list[str | None]:
    """The call ids of the session's tool results, in conversation order."""
    return [m.tool_call_id for m in await runtime.messages(session_id) if m.role == "tool"]


async def counters(runtime: AgentRuntime, session_id: str) -> list[tuple[str, str]]:
    """The session's usage counters other than wait times: ``(source_type, toolCallId)``."""
    query = sa.text(
        "SELECT source_type, data FROM __agents_usage WHERE session_id = :sid AND kind = 'custom'"
    )
    async with runtime.store.engine.connect() as conn:
        rows = (await conn.execute(query, {"sid": session_id})).all()
    found = []
    for source_type, data in rows:
        fields = json.loads(data) if isinstance(data, str) else data
        if source_type != metrics.CLIENT_TOOL_WAIT_MS:
            found.append((str(source_type), str(fields["toolCallId"])))
    return sorted(found)


async def model_rows(runtime: AgentRuntime, session_id: str) -> int:
    """How many model calls the session committed (one token row each)."""
    query = sa.text(
        "SELECT COUNT(*) FROM __agents_usage WHERE session_id = :sid AND kind = 'tokens'"
    )
    async with runtime.store.engine.connect() as conn:
        return int((await conn.execute(query, {"sid": session_id})).scalar_one())


def hold_continuation_record(monkeypatch: Any) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold every continuation before it reads its hibernation record: ``reached`` is set
    when one gets there, and it goes on once the test sets ``gate``."""
    from helix_dbos.runtime._hibernated import continuation

    reached, gate = asyncio.Event(), asyncio.Event()
    real = continuation._record

    async def held(*args: Any) -> Any:
        reached.set()
        await gate.wait()
        return await real(*args)

    monkeypatch.setattr(continuation, "_record", held)
    return reached, gate


async def wait_until(probe: Any, seconds: float = 20.0) -> Any:
    """Poll ``probe()`` until it returns something truthy (at most ``seconds``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        found = await probe()
        if found or loop.time() > deadline:
            return found
        await asyncio.sleep(0.02)


async def hibernated(runtime: AgentRuntime, session_id: str) -> dict[str, Any]:
    """The session's hibernation mark once it has one (fails the test if it never does)."""

    async def probe() -> Any:
        state = await runtime.store.get(session_id)
        return state.metadata.get("hibernated")

    mark: dict[str, Any] | None = await wait_until(probe)
    assert mark, f"{session_id} did not hibernate"
    return mark


async def cold_turn(
    runtime: AgentRuntime, message: str = "2 edits", name: str = "cold"
) -> tuple[Any, list[str]]:
    """Start a turn and wait until it has hibernated: its handle and its calls, in order."""
    handle = await runtime.start(name, message)
    assert await hibernated(runtime, handle.session_id) is not None
    state = await runtime.store.get(handle.session_id)
    calls = sorted(state.pending.values(), key=lambda p: p.index)
    return handle, [p.tool_call_id for p in calls]


async def completed(runtime: AgentRuntime, handle: Any) -> dict[str, Any]:
    """The turn's final outcome (its handle's, followed into its continuations), asserted
    completed. Read once the session has ended: a continuation's result is read by polling
    DBOS, once a second, and by then the first poll finds it."""
    await runtime.wait(handle.session_id, timeout=30)
    outcome = await asyncio.wait_for(handle.result(), 30)
    assert outcome["outcome"] == "completed", outcome
    return outcome  # type: ignore[no-any-return]


def assert_paired(history: list[Any]) -> None:
    """Every tool_use has exactly one tool_result, right after its assistant message."""
    results = [m.tool_call_id for m in history if m.role == "tool"]
    assert len(results) == len(set(results)), history
    for i, m in enumerate(history):
        if m.role == "assistant" and m.tool_calls:
            following = history[i + 1 : i + 1 + len(m.tool_calls)]
            assert [f.tool_call_id for f in following] == [c.id for c in m.tool_calls], history


async def _ended(workflow_id: str | None) -> bool:
    found = await DBOS.list_workflows_async(workflow_ids=[workflow_id or ""], load_input=False)
    return bool(found) and found[0].status == "SUCCESS"


async def settled(runtime: AgentRuntime, session_id: str, hot: bool) -> dict[str, Any]:
    """Wait until the session's turn is hibernated, its workflow ended (or, ``hot``, parked
    live); its line."""
    while True:
        state = await runtime.session(session_id)
        if hot:
            ready = state.workflow_id in runtime.ctx.parked
        else:
            ready = "hibernated" in state.metadata and await _ended(state.workflow_id)
        if ready and state.pending:
            calls = sorted(state.pending.values(), key=lambda p: p.index)
            return {
                "session": session_id,
                "agent": state.agent_type,
                "calls": [p.tool_call_id for p in calls],
                "workflow": state.workflow_id,
            }
        await asyncio.sleep(0.02)


async def park(url: str, version: str, specs: list[str]) -> None:
    runtime = AgentRuntime(agents(), settings(url, version))
    await runtime.launch()
    for spec in specs:
        head, _, message = spec.partition(":")
        name, _, layout = head.partition("@")
        # A layout given: the turn records it, as a process of that contract would have.
        names.TURN_LAYOUT = int(layout or CURRENT_LAYOUT)
        handle = await runtime.start(name, message)
        hot = name == "hot" or names.TURN_LAYOUT < CURRENT_LAYOUT
        line = await settled(runtime, handle.session_id, hot=hot)
        print(json.dumps(line), flush=True)
    print("parked", flush=True)
    await asyncio.to_thread(sys.stdin.read)  # until the test closes it (or kills us)
    await runtime.shutdown()


async def answer_both(runtime: AgentRuntime) -> None:
    """Start a ``cold`` turn of two calls, print its line once hibernated, answer both."""
    handle = await runtime.start("cold", "2 edits")
    line = await settled(runtime, handle.session_id, hot=False)
    print(json.dumps(line), flush=True)
    for n, tcid in enumerate(line["calls"]):
        await runtime.submit_tool_result(handle.session_id, tcid, result={"applied": n + 1})


async def exit_at_hibernate(url: str) -> None:
    from helix_dbos.runtime._turn import hibernation

    real = hibernation.hibernate

    async def commit_then_die(
        session_id: str, run_id: str, workflow_id: str, *rest: Any, **kwargs: Any
    ) -> Any:
        decided = await real(session_id, run_id, workflow_id, *rest, **kwargs)
        line = {"session": session_id, "agent": "cold", "workflow": workflow_id}
        print(json.dumps(line), flush=True)
        os._exit(EXIT_AT_HIBERNATE)
        return decided

    hibernation.hibernate = commit_then_die
    runtime = AgentRuntime(agents(), settings(url, keeper=0))
    await runtime.launch()
    await runtime.start("cold", "2 edits")
    await asyncio.sleep(3600)  # the turn's hibernate commit ends the process


async def exit_at_start(url: str) -> None:
    from helix_dbos.runtime._submit import answer as submit

    async def die(*args: Any) -> None:
        os._exit(EXIT_AT_START)

    setattr(submit, "start_continuation", die)  # noqa: B010 (not in the module's __all__)
    runtime = AgentRuntime(agents(), settings(url, keeper=0))
    await runtime.launch()
    await answer_both(runtime)
    print("the continuation started", flush=True)  # never: the process died first


async def kill_in_continuation(url: str) -> None:
    llm = HangingLLM()
    runtime = AgentRuntime(agents(llm), settings(url, keeper=0))
    await runtime.launch()
    await answer_both(runtime)
    await llm.hung.wait()
    print("continuing", flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    mode, db_url = sys.argv[1], sys.argv[2]
    if mode == "park":
        asyncio.run(park(db_url, sys.argv[3], sys.argv[4:]))
    elif mode == "exit-at-hibernate":
        asyncio.run(exit_at_hibernate(db_url))
    elif mode == "exit-at-start":
        asyncio.run(exit_at_start(db_url))
    else:
        asyncio.run(kill_in_continuation(db_url))
