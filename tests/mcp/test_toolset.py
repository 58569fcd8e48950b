"""An MCP server's tools in an agent: the real ``mcp`` SDK's server over stdio and HTTP, a
real runtime on Postgres and SQLite.

A call round-trips with the step's idempotency key in ``_meta``; the listing's schemas reach
the model, namespaced and filtered; a destructive tool waits for an approval (run once when
approved, never when denied); two servers with a tool of one name do not clash; a server
killed mid-call is tried again, then becomes the typed tool error the model reads.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from mcp_types import ToolAnnotations

from helix_dbos.core.agents import define_agent
from helix_dbos.core.tools import define_tool
from helix_dbos.errors import ToolDefinitionError
from helix_dbos.llm.scripted import ScriptedLLM
from helix_dbos.mcp import (
    MCP_SERVER_UNAVAILABLE,
    mcp_http,
    mcp_stdio,
)
from helix_dbos.runtime import AgentRuntime
from tests.mcp.conftest import Journal
from tests.mcp.scripted import files, script


async def turn(rt: AgentRuntime, *calls: tuple[str, dict[str, Any]]) -> str:
    handle = await rt.start("assistant", json.dumps([list(c) for c in calls]))
    view = await rt.wait(handle.session_id, timeout=60)
    assert view["status"] == "completed", view
    return str((await handle.result())["text"])


async def test_a_call_over_stdio_round_trips_with_the_steps_key(
    make_runtime: Any, journal: Journal
) -> None:
    """The model sees the allowed tools, namespaced, with the server's input schema; a call
    answers the server's result and carries ``<workflow>:<step>`` as its idempotency key."""
    llm = ScriptedLLM(script)
    toolset = files(journal, allow={"add", "echo"})
    rt = await make_runtime([define_agent("assistant", llm=llm, tools=[toolset])])
    text = await turn(rt, ("files__add", {"a": 2, "b": 3}))
    assert text == 'ok: {"result": 5}'
    schemas = {t.name: t for t in llm.requests[0].tools}
    assert set(schemas) == {"files__add", "files__echo"}, "the allow-list keeps two tools"
    assert schemas["files__add"].input_schema["required"] == ["a", "b"]
    assert schemas["files__add"].input_schema["properties"]["a"]["type"] == "integer"
    [made] = journal.calls("add")
    assert made["args"] == {"a": 2, "b": 3}
    workflow, _, step = made["key"].rpartition(":")
    assert workflow and step.isdigit(), made["key"]
    # A second turn reuses the running server (one process), with a key of its own.
    assert await turn(rt, ("files__echo", {"text": "hi"})) == 'ok: {"result": "files: hi"}'
    [again] = journal.calls("echo")
    assert again["pid"] == made["pid"] and again["key"] != made["key"]


async def test_a_call_over_streamable_http_sends_the_headers(
    make_runtime: Any, journal: Journal, http_server: str
) -> None:
    """Over HTTP with the server's token the call answers; with a wrong token the server
    refuses the listing (logged ``mcp.list_failed``): none of its tools reaches the model,
    and a call of one anyway is an unknown tool, never sent."""
    good = mcp_http("remote", http_server, headers={"Authorization": "Bearer secret"})
    bad = mcp_http(
        "locked", http_server, headers={"Authorization": "Bearer nope"}, attempts=2, backoff=0
    )
    llm = ScriptedLLM(script)
    rt = await make_runtime([define_agent("assistant", llm=llm, tools=[good, bad])])
    text = await turn(rt, ("remote__echo", {"text": "over http"}), ("locked__echo", {"text": "x"}))
    first, second = text.split(" | ")
    assert first == 'ok: {"result": "http: over http"}'
    assert second == "validation_failed: Unknown tool 'locked__echo'"
    assert [c["args"] for c in journal.calls("echo")] == [{"text": "over http"}]
    assert journal.calls("echo")[0]["key"]
    assert {t.name for t in llm.requests[0].tools} >= {"remote__echo", "remote__delete_file"}
    assert not any(t.name.startswith("locked__") for t in llm.requests[0].tools)


async def test_a_destructive_tool_waits_for_approval_then_runs_once_or_never(
    make_runtime: Any, journal: Journal
) -> None:
    """``delete_file`` (destructive) parks the turn on an approval: approved, the server runs
    it once; denied with a reason, never, and the model reads the reason."""
    rt = await make_runtime(
        [define_agent("assistant", llm=ScriptedLLM(script), tools=[files(journal)])]
    )
    handle = await rt.start("assistant", json.dumps([["files__delete_file", {"path": "/a"}]]))
    [pending] = await rt.wait_for_pending(handle.session_id)
    assert pending["kind"] == "approval" and pending["toolName"] == "files__delete_file"
    assert journal.calls("delete_file") == [], "nothing runs before the approval"
    await rt.submit_tool_result(
        handle.session_id,
        pending["toolCallId"],
        kind="approval-response",
        approval_id=pending["approvalId"],
        approved=True,
    )
    assert (await handle.result())["text"] == 'ok: {"result": "deleted /a"}'
    assert [c["args"] for c in journal.calls("delete_file")] == [{"path": "/a"}]

    handle = await rt.start("assistant", json.dumps([["files__delete_file", {"path": "/b"}]]))
    [pending] = await rt.wait_for_pending(handle.session_id)
    await rt.submit_tool_result(
        handle.session_id,
        pending["toolCallId"],
        kind="approval-response",
        approval_id=pending["approvalId"],
        approved=False,
        reason="not that one",
    )
    text = (await handle.result())["text"]
    assert text.startswith("approval_denied: ") and "not that one" in text
    assert [c["args"] for c in journal.calls("delete_file")] == [{"path": "/a"}]


async def test_two_servers_with_a_tool_of_one_name_do_not_clash(
    make_runtime: Any, journal: Journal
) -> None:
    """Two servers both have ``echo``: each is its toolset's, and each call reaches its own."""
    left, right = files(journal, "left"), files(journal, "right")
    llm = ScriptedLLM(script)
    rt = await make_runtime([define_agent("assistant", llm=llm, tools=[left, right])])
    text = await turn(rt, ("left__echo", {"text": "a"}), ("right__echo", {"text": "b"}))
    assert text == 'ok: {"result": "left: a"} | ok: {"result": "right: b"}'
    names = [t.name for t in llm.requests[0].tools]
    assert "left__echo" in names and "right__echo" in names
    assert len({c["pid"] for c in journal.calls("echo")}) == 2


async def test_a_server_killed_mid_call_is_tried_again_then_a_typed_tool_error(
    make_runtime: Any, journal: Journal
) -> None:
    """A server that dies in every attempt: the model reads ``mcp_server_unavailable`` and the
    turn completes; every attempt carried the same key. A server that dies once: the next
    attempt (a new process) answers."""
    toolset = files(journal, attempts=3, backoff=0.05)
    rt = await make_runtime([define_agent("assistant", llm=ScriptedLLM(script), tools=[toolset])])
    text = await turn(rt, ("files__crash", {}))
    assert text.startswith(f"{MCP_SERVER_UNAVAILABLE}: The MCP server 'files' did not answer")
    crashes = journal.calls("crash")
    assert len(crashes) == 3 and len({c["key"] for c in crashes}) == 1
    assert len({c["pid"] for c in crashes}) == 3, "each attempt started the server again"

    assert await turn(rt, ("files__flaky", {})) == 'ok: {"result": "flaky answered"}'
    flaky = journal.calls("flaky")
    assert len(flaky) == 2 and flaky[0]["key"] == flaky[1]["key"]
    assert flaky[0]["pid"] != flaky[1]["pid"]


@pytest.mark.parametrize("hibernate_after", [None, 0], ids=["live", "hibernated"])
async def test_a_tool_that_asks_for_input_parks_the_turn_until_answered(
    make_runtime: Any, journal: Journal, hibernate_after: float | None
) -> None:
    """A tool answering ``input_required`` parks the turn on a pending client call showing
    its form; the submitted answer calls the tool again with it (``inputResponses``), and the
    model reads that answer; a declined form reaches the tool as a decline. The same when the
    turn hibernated before the answer."""
    agent = define_agent(
        "assistant",
        llm=ScriptedLLM(script),
        tools=[files(journal)],
        hibernate_after=hibernate_after,
    )
    rt = await make_runtime([agent])
    for submitted, read in (
        ({"ok": True}, 'ok: {"result": "confirmed: {\\"ok\\": true}"}'),
        ({"action": "decline"}, 'ok: {"result": "not confirmed (decline)"}'),
    ):
        handle = await rt.start("assistant", json.dumps([["files__confirm", {}]]))
        [pending] = await rt.wait_for_pending(handle.session_id)
        assert pending["kind"] == "client" and pending["toolName"] == "files__confirm"
        form = pending["input"]["inputRequests"]["sure"]
        assert form["method"] == "elicitation/create" and form["params"]["message"] == "Sure?"
        assert pending["input"]["arguments"] == {}
        if hibernate_after == 0:  # the hibernate commit lands just after the park
            for _ in range(200):
                if "hibernated" in (await rt.session(handle.session_id)).metadata:
                    break
                await asyncio.sleep(0.05)
            assert "hibernated" in (await rt.session(handle.session_id)).metadata
        status = await rt.status(handle.session_id)
        assert status["status"] == "suspended_client_tool" and status["waitingFor"] == [
            "client_tool"
        ]
        answer = await rt.submit_tool_result(
            handle.session_id, pending["toolCallId"], result=submitted
        )
        assert answer.status == "accepted"
        assert (await handle.result())["text"] == read
    calls = journal.calls("confirm")
    assert [c["args"]["answered"] for c in calls] == [[], ["sure"], [], ["sure"]]


def test_which_tools_are_gated() -> None:
    """Destructive by default: gated unless annotated read-only or non-destructive (a tool
    without annotations is gated); by name first; ``all`` and ``none``."""
    toolset = mcp_stdio("s", ["true"], require_approval={"r"}, skip_approval={"d"})
    assert toolset.gated("x", None)
    assert not toolset.gated("x", ToolAnnotations(readOnlyHint=True))
    assert not toolset.gated("x", ToolAnnotations(destructiveHint=False))
    assert toolset.gated("x", ToolAnnotations(destructiveHint=True))
    assert toolset.gated("x", ToolAnnotations(title="no hints"))
    assert toolset.gated("r", ToolAnnotations(readOnlyHint=True))
    assert not toolset.gated("d", ToolAnnotations(destructiveHint=True))
    assert not mcp_stdio("s", ["true"], approval="none").gated("x", None)
    assert mcp_stdio("s", ["true"], approval="all").gated("x", ToolAnnotations(readOnlyHint=True))


def test_toolsets_are_checked_when_the_agent_is_defined() -> None:
    """Two toolsets of one name, or an own tool in a toolset's namespace, are refused."""
    llm = ScriptedLLM(script)
    with pytest.raises(ToolDefinitionError):
        define_agent("a", llm=llm, tools=[mcp_stdio("s", ["x"]), mcp_http("s", "http://h/mcp")])
    own = define_tool("s__echo", "clash", ToolAnnotations, execute=lambda args: None)
    with pytest.raises(ToolDefinitionError):
        define_agent("a", llm=llm, tools=[own, mcp_stdio("s", ["x"])])
    with pytest.raises(ToolDefinitionError):
        mcp_stdio("bad__name", ["x"])
