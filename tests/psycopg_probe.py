"""Watching what psycopg sends: statements (cursors) and transaction commands (BEGIN, COMMIT).

Transaction commands go through a private method of psycopg's connection class, which moved
between modules across psycopg 3.1 and 3.2: it is found on the class, not imported by path.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

__all__ = ["record_commands"]


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
