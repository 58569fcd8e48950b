"""The store's one dispatch on the database: what Postgres and SQLite each do their own way.

A store method that differs by dialect calls its ``Paths``, picked once per store
(``paths_for``): Postgres's in ``pg_paths.py`` (the queued writes, the hot reads on the
driver connection), SQLite's in ``sqlite_paths.py`` (SQLAlchemy Core, the write lock taken as
a transaction opens). Every other statement is the same on both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..core.events import SessionEvent
from ..core.messages import Message
from ..core.session import SessionState
from .batch import WriteBatch
from .engine import POSTGRES, StoreEngine
from .pg_paths import PostgresPaths
from .sqlite_paths import SQLitePaths

__all__ = ["Paths", "paths_for"]

T = TypeVar("T")


class Paths(Protocol):
    """A dialect's side of the store's methods (see ``SessionStore`` for what each does)."""

    #: The insert of usage rows that skips a row whose ``dedupe_key`` exists.
    usage_insert: sa.Executable

    async def attempt(
        self,
        body: Callable[[], Awaitable[T]],
        *,
        committed: Callable[[WriteBatch], None],
    ) -> T:
        """One attempt of ``transact``'s transaction, bound to the task, committed."""

    async def load(self, session_id: str, conn: AsyncConnection | None) -> SessionState | None:
        """The session, or ``None``."""

    async def load_many(
        self, ids: list[str], conn: AsyncConnection | None
    ) -> dict[str, SessionState]:
        """The sessions that exist among ``ids``."""

    async def lock(self, ids: list[str], conn: AsyncConnection) -> dict[str, SessionState]:
        """The rows, held by ``conn``'s transaction until it ends."""

    async def tree(self, session_id: str, conn: AsyncConnection | None) -> list[SessionState]:
        """The session, then the rest of its root's tree but the root."""

    async def load_messages(self, session_id: str, conn: AsyncConnection | None) -> list[Message]:
        """The live conversation, oldest first."""

    async def step_inputs(
        self, session_id: str, slot: str, conn: AsyncConnection | None
    ) -> tuple[SessionState, dict[str, Any] | None, list[Message]]:
        """A model step's inputs."""

    async def resume_inputs(
        self, session_id: str, ids: list[str], conn: AsyncConnection | None
    ) -> tuple[dict[str, SessionState], list[Message]]:
        """A woken turn's rows and its own conversation."""

    async def resume_recorded(
        self, session_id: str, ids: list[str], slot: str
    ) -> tuple[dict[str, Any] | None, dict[str, SessionState], list[Message]]:
        """``resume_inputs`` (on a connection of its own) with the recorded state of ``slot``
        (``None`` when it did not commit, or when ``session_id``'s row is missing)."""

    async def insert_events(
        self,
        c: AsyncConnection,
        session_id: str,
        run_id: str | None,
        new: Sequence[dict[str, Any]],
        now: datetime,
    ) -> int:
        """Append events on ``c`` now; the last sequence number."""

    async def read_events(
        self, session_id: str, after: int, limit: int, conn: AsyncConnection | None
    ) -> list[SessionEvent]:
        """Events with ``sequence > after``, in order."""

    async def get_checkpoint(
        self, checkpoint_id: str, conn: AsyncConnection | None
    ) -> dict[str, Any] | None:
        """One checkpoint by id, or ``None``."""


def paths_for(db: StoreEngine) -> Paths:
    """The paths of ``db``'s dialect."""
    return PostgresPaths(db) if db.dialect == POSTGRES else SQLitePaths(db)
