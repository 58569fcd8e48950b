"""Watching what psycopg sends: statements (cursors) and transaction commands (BEGIN, COMMIT).

Transaction commands go through a private method of psycopg's connection class, which moved
between modules across psycopg 3.1 and 3.2: it is found on the class, not imported by path.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

__all__ = ["record_commands", "record_task_statements"]


def record_commands(monkeypatch: pytest.MonkeyPatch, keep: Any = None) -> list[bytes]:
    """Record every transaction command an async connection sends (``keep(conn)``: which
    connections count; all by default) until ``monkeypatch`` is undone."""
    owner = next(k for k in psycopg.AsyncConnection.__mro__ if "_exec_command" in vars(k))
    original = vars(owner)["_exec_command"]
    sent: list[bytes] = []

    def exec_command(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(self, psycopg.AsyncConnection) and (keep is None or keep(self)):
            sent.append(bytes(command))
        return original(self, command, *args, **kwargs)

    monkeypatch.setattr(owner, "_exec_command", exec_command)
    return sent


def record_task_statements(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[bytes]]:
    """Record what the calling task alone sends (not the runtime's background work) until
    ``monkeypatch`` is undone: its statements (async cursors) and its transaction commands."""
    task = asyncio.current_task()
    original = psycopg.AsyncCursor.execute
    sent: list[str] = []

    async def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if asyncio.current_task() is task:
            sent.append(str(query))
        return await original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", execute)
    return sent, record_commands(monkeypatch, lambda _conn: asyncio.current_task() is task)
