"""One open connection to an MCP server, reopened after a failure.

A ``Link`` holds one ``mcp.Client`` per event loop: for stdio, the server's subprocess,
started on first use and started again after it died; for Streamable HTTP, the client and
its connection pool. The client is entered and left by a task of its own (the SDK's
transports are context managers that must be left by the task that entered them), and
the callers of any task of that loop share it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from mcp import Client

__all__ = ["Link"]

#: Seconds ``aclose`` waits for a client to leave (its subprocess to end) before cancelling it.
CLOSE_SECONDS = 5.0


class _Owner:
    """The task that holds one client open until told to stop, or until it breaks."""

    __slots__ = ("loop", "ready", "stop", "task")

    def __init__(self, connect: Callable[[], Client]) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        self.ready: asyncio.Future[Client] = self.loop.create_future()
        self.task = self.loop.create_task(self._own(connect), name="helix-mcp-link")

    async def _own(self, connect: Callable[[], Client]) -> None:
        try:
            async with connect() as client:
                # A 2026-07-28 server may refuse a call of a tool this client never listed.
                await client.list_tools()
                self.ready.set_result(client)
                await self.stop.wait()
        except Exception as exc:  # a failed open, or the connection broke: the next use reopens
            if not self.ready.done():
                self.ready.set_exception(exc)

    @property
    def alive(self) -> bool:
        return not self.task.done() and self.loop is asyncio.get_running_loop()

    async def close(self) -> None:
        self.stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), CLOSE_SECONDS)
        except (TimeoutError, Exception):
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task
        if self.ready.done() and not self.ready.cancelled():
            self.ready.exception()  # retrieved: a failed open is not logged as unhandled


class Link:
    """The open client of one MCP server, shared by the calls of one event loop."""

    def __init__(self, connect: Callable[[], Client]) -> None:
        self._connect = connect
        self._owner: _Owner | None = None

    async def client(self) -> Client:
        """The open client: the current one, or a new one (a subprocess started again).

        Raises:
            Exception: whatever opening the connection raised (the server is down).
        """
        owner = self._owner
        if owner is None or not owner.alive:
            if owner is not None and owner.loop is asyncio.get_running_loop():
                await owner.close()
            owner = self._owner = _Owner(self._connect)
        return await asyncio.shield(owner.ready)

    async def reset(self) -> None:
        """Drop the current client (after a failure): the next use opens a new one."""
        owner, self._owner = self._owner, None
        if owner is not None and owner.loop is asyncio.get_running_loop():
            await owner.close()

    async def aclose(self) -> None:
        """Close the client (a stdio server's subprocess ends)."""
        await self.reset()
