"""Counting the statements and transactions a real turn sends to Postgres."""

from __future__ import annotations

import contextvars
from collections import defaultdict
from typing import Any

import psycopg
import pytest

from helix_dbos.runtime._commits import once
from helix_dbos.runtime._turn import steps
from helix_dbos.store import pg

_counting: contextvars.ContextVar[str | None] = contextvars.ContextVar("counting", default=None)


class Commits:
    """The statements and transaction commands of each exactly-once commit, by the kind of
    its slot (``model``, ``results``, ``finish``...), in the order the commits ran; and the
    units of work sent back to SQLAlchemy (``NeedsEngine``) meanwhile."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.statements: dict[str, list[list[str]]] = defaultdict(list)
        self.commands: dict[str, list[list[bytes]]] = defaultdict(list)
        self.fallbacks: list[str] = []
        real_commit = once.commit_once

        async def counted_commit(context: once.CommitContext, *args: Any, **kwargs: Any) -> Any:
            kind = context.slot.rpartition(":")[2]
            self.statements[kind].append([])
            self.commands[kind].append([])
            token = _counting.set(kind)
            try:
                return await real_commit(context, *args, **kwargs)
            finally:
                _counting.reset(token)

        monkeypatch.setattr(once, "commit_once", counted_commit)
        monkeypatch.setattr(steps, "commit_once", counted_commit)
        real_execute = psycopg.AsyncCursor.execute

        async def execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            kind = _counting.get()
            if kind is not None:
                self.statements[kind][-1].append(str(query))
            return await real_execute(cursor, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.AsyncCursor, "execute", execute)
        owner = next(k for k in psycopg.AsyncConnection.__mro__ if "_exec_command" in vars(k))
        real_command = vars(owner)["_exec_command"]

        def exec_command(conn: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            kind = _counting.get()
            if kind is not None and isinstance(conn, psycopg.AsyncConnection):
                self.commands[kind][-1].append(bytes(command))
            return real_command(conn, command, *args, **kwargs)

        # As ``tests/psycopg_probe.record_commands`` finds it: a private method, on the class.
        monkeypatch.setattr(owner, "_exec_command", exec_command)
        real_init = pg.NeedsEngine.__init__

        def needs_engine(error: Any, *args: Any) -> None:
            self.fallbacks.append(str(args))
            real_init(error, *args)

        monkeypatch.setattr(pg.NeedsEngine, "__init__", needs_engine)

    def shape(self, kind: str) -> list[tuple[int, list[bytes]]]:
        """Each commit of ``kind``: its statements' count and its transaction commands."""
        return [
            (len(sent), commands)
            for sent, commands in zip(self.statements[kind], self.commands[kind], strict=True)
        ]
