"""MCP in both directions, timed on the local Postgres (a fresh database, dropped after).

    .venv/bin/python bench/mcp_calls.py --calls 100 --tasks 50

1. **An MCP tool call through a helix turn** against the same call made directly with the
   SDK's client, each over stdio to one running server (the SDK's ``MCPServer``, a tool that
   echoes): ``direct`` is ``client.call_tool`` alone; ``turn+mcp`` a whole turn whose
   scripted model calls the MCP tool, then answers (two model steps, the recorded
   ``helix.turn.server_tool`` step between them); ``turn+local`` the same turn with a local
   server tool that returns at once, so ``turn+mcp - turn+local`` is what the MCP call costs
   inside a turn.
2. **``tasks/update`` -> a ``tasks/get`` that reads ``completed``** for a turn parked on an
   approval, over HTTP (uvicorn in this process, the SDK's client): the clock starts as the
   update is sent and stops when a ``tasks/get`` (sent back to back) reads ``completed``.
   Beside it, the parts: ``tasks/update`` alone, and the same approval answered through the
   Python API (``submit_tool_result``) until ``status`` reads ``completed``: the turn's own
   continuation (the wake-up, the answers read, the approved tool's recorded step, the
   results commit, the model's reply and the turn's end), which MCP does not change.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from fastapi import FastAPI
from mcp import Client, StdioServerParameters
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helix_dbos import AgentRuntime, HelixSettings, define_agent, define_tool  # noqa: E402
from helix_dbos.http.mcp_route import MCPEndpoint, mount_mcp  # noqa: E402
from helix_dbos.llm import ScriptedLLM, call, reply  # noqa: E402
from helix_dbos.mcp import mcp_stdio  # noqa: E402
from tests.mcp.tasks_client import connect, get_task, poll, served, update_task  # noqa: E402

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
SERVER = """
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("echo")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> str:
    return text


server.run()
"""


class EchoIn(BaseModel):
    text: str


def model(tool: str) -> ScriptedLLM:
    def answer(request: Any) -> Any:
        last = request.messages[-1]
        if last.role == "user":
            return call(request, (tool, {"text": last.content}))
        return reply(last.content)

    return ScriptedLLM(answer)


def p50(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    return f"p50 {statistics.median(values) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms"


async def direct(command: list[str], calls: int) -> list[float]:
    params = StdioServerParameters(command=command[0], args=command[1:])
    times = []
    async with Client(params) as client:
        await client.list_tools()
        await client.call_tool("echo", {"text": "warm"})
        for i in range(calls):
            began = time.perf_counter()
            await client.call_tool("echo", {"text": f"m{i}"})
            times.append(time.perf_counter() - began)
    return times


async def turns(rt: AgentRuntime, agent: str, calls: int) -> list[float]:
    await (await rt.start(agent, "warm")).result()
    times = []
    for i in range(calls):
        began = time.perf_counter()
        await (await rt.start(agent, f"m{i}")).result()
        times.append(time.perf_counter() - began)
    return times


async def tasks(rt: AgentRuntime, count: int) -> tuple[list[float], list[float]]:
    app = FastAPI()
    mount_mcp(app, MCPEndpoint(rt, allow_unauthenticated=True))
    times: list[float] = []
    updated: list[float] = []
    async with served(app) as url, connect(url, {}) as client:
        for _ in range(count + 1):
            created = await client.session.call_tool(
                "banker", {"message": "pay"}, allow_claimed=True
            )
            tid = created.task_id  # type: ignore[union-attr]
            [key] = (await poll(client, tid, "input_required"))["inputRequests"]
            began = time.perf_counter()
            await update_task(
                client, tid, {key: {"action": "accept", "content": {"approved": True}}}
            )
            updated.append(time.perf_counter() - began)
            while (await get_task(client, tid))["status"] != "completed":
                pass
            times.append(time.perf_counter() - began)
    return times[1:], updated[1:]  # the first one warms the path


async def submits(rt: AgentRuntime, count: int) -> list[float]:
    """The same approval answered through the Python API, until the turn reads completed."""
    times = []
    for _ in range(count + 1):
        handle = await rt.start("banker", "pay")
        [pending] = await rt.wait_for_pending(handle.session_id)
        began = time.perf_counter()
        await rt.submit_tool_result(
            handle.session_id,
            pending["toolCallId"],
            kind="approval-response",
            approval_id=pending["approvalId"],
            approved=True,
        )
        while (await rt.status(handle.session_id))["status"] != "completed":
            pass
        times.append(time.perf_counter() - began)
    return times[1:]


async def main(calls: int, count: int) -> None:
    name = f"helix_bench_mcp_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = ADMIN.rpartition("/")[0] + "/" + name
    try:
        with tempfile.TemporaryDirectory() as tmp:
            server = Path(tmp) / "echo_server.py"
            server.write_text(SERVER)
            command = [sys.executable, str(server)]
            echo = mcp_stdio("bench", command, list_ttl=3600)
            local = define_tool("local_echo", "Echo", EchoIn, execute=lambda a: a.text)
            gate = define_tool(
                "transfer", "Move", EchoIn, execute=lambda a: a.text, require_approval=True
            )
            agents = [
                define_agent("via_mcp", llm=model("bench__echo"), tools=[echo]),
                define_agent("via_local", llm=model("local_echo"), tools=[local]),
                define_agent("banker", llm=model("transfer"), tools=[gate]),
            ]
            settings = HelixSettings(
                database_url=url, executor_id="bench", application_version="bench"
            )
            figures: dict[str, list[float]] = {"direct": await direct(command, calls)}
            async with AgentRuntime(agents, settings) as rt:
                figures["turn+mcp"] = await turns(rt, "via_mcp", calls)
                figures["turn+local"] = await turns(rt, "via_local", calls)
                done, updated = await tasks(rt, count)
                figures["tasks/update -> completed"] = done
                figures["tasks/update alone"] = updated
                figures["submit -> completed (API)"] = await submits(rt, count)
        for label, values in figures.items():
            print(f"{label:28} {p50(values)} (n={len(values)})")
        mcp, own = statistics.median(figures["turn+mcp"]), statistics.median(figures["turn+local"])
        print(
            f"{'MCP call inside a turn':28} p50 {(mcp - own) * 1000:.1f} ms (turn+mcp - turn+local)"
        )
        print(json.dumps({k: statistics.median(v) for k, v in figures.items()}))
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=50)
    options = parser.parse_args()
    asyncio.run(main(options.calls, options.tasks))
