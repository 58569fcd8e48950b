"""The Tasks extension on the SDK's client side, for the tests: the SDK's ``Client`` with
an extension that declares ``io.modelcontextprotocol/tasks`` and claims the ``task``
result shape, and the three ``tasks/*`` requests sent through its session."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any, Literal

import httpx2
import mcp_types as types
import uvicorn
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"


class CreatedTask(types.Result):
    """A ``tools/call`` answered with a task."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str


async def _no_resolution(result: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
    raise AssertionError("the tests read the task themselves (allow_claimed=True)")


class TasksExtension(ClientExtension):
    identifier = TASKS

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=_no_resolution)]


class TaskIdParams(types.RequestParams):
    task_id: str


class UpdateParams(TaskIdParams):
    input_responses: dict[str, Any]


class GetTask(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class UpdateTask(types.Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CancelTask(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class Answer(types.Result):
    """Any answer, its fields kept as sent."""

    model_config = ConfigDict(extra="allow")


async def _send(client: Client, request: Any) -> dict[str, Any]:
    answer = await client.session.send_request(request, Answer)
    return answer.model_dump(by_alias=True, exclude_none=True)


async def get_task(client: Client, tid: str) -> dict[str, Any]:
    return await _send(client, GetTask(params=TaskIdParams(task_id=tid)))


async def update_task(client: Client, tid: str, responses: dict[str, Any]) -> dict[str, Any]:
    return await _send(
        client, UpdateTask(params=UpdateParams(task_id=tid, input_responses=responses))
    )


async def cancel_task(client: Client, tid: str) -> dict[str, Any]:
    return await _send(client, CancelTask(params=TaskIdParams(task_id=tid)))


async def poll(client: Client, tid: str, *statuses: str, timeout: float = 60) -> dict[str, Any]:
    """``tasks/get`` until the task's status is one of ``statuses``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        task = await get_task(client, tid)
        if task["status"] in statuses:
            return task
        assert asyncio.get_running_loop().time() < deadline, task
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def connect(
    url: str, headers: dict[str, str], *, tasks: bool = True, **options: Any
) -> AsyncIterator[Client]:
    """The SDK's client on ``url`` with ``headers`` (and the Tasks extension)."""

    @contextlib.asynccontextmanager
    async def transport() -> AsyncIterator[Any]:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            streamable_http_client(url, http_client=http) as streams,
        ):
            yield streams

    extensions = [TasksExtension()] if tasks else None
    async with Client(transport(), extensions=extensions, **options) as client:
        yield client


@contextlib.asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """``app`` served by uvicorn on a free local port, in this event loop: its ``/mcp`` URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), task
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await task
