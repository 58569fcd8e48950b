"""The fleet's own tables: ``__agents_executors`` (who is alive) and ``__agents_adoptions``.

An executor is live while its row is not stopped and its heartbeat is younger than the
adoption window. Times come from the database's clock on Postgres (one clock for the whole
fleet) and from this machine's on SQLite (one machine). Every method joins the block bound
to the task (``SessionStore.reading`` or ``SessionStore.writing``): the fleet decides what
goes in one transaction (a claim and the relabel it allows commit together).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from .engine import joined
from .schema import adoptions, executors

if TYPE_CHECKING:
    from .dialect import Backend

__all__ = ["FleetTables", "reuse_event"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def reuse_event(pid: int | None, hostname: str | None) -> str:
    """The event for a launch with the id of an executor whose row looks live:
    ``fleet.executor_restarted`` (INFO) when that process is on this host and no longer runs
    (a restart within the liveness window, as ``scripts/demo`` does), else
    ``fleet.executor_id_reused`` (WARNING: perhaps two live processes share the id)."""
    if pid is not None and hostname == socket.gethostname() and not _running(pid):
        return "fleet.executor_restarted"
    return "fleet.executor_id_reused"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, and belongs to someone else
        return True
    return True


class FleetTables:
    """The fleet's tables on one backend (``SessionStore.fleet``)."""

    __slots__ = ("_b",)

    def __init__(self, backend: Backend) -> None:
        self._b = backend

    def _live(self, adopt_after: float) -> Any:
        """The condition on ``__agents_executors`` of a live executor."""
        return sa.and_(
            executors.c.stopped_at.is_(None), executors.c.heartbeat_at > self._b.ago(adopt_after)
        )

    async def live_executors(self, adopt_after: float) -> dict[str, str]:
        """The live executors: ``{executor_id: application_version}``."""
        conn = joined()
        rows = await conn.execute(
            sa.select(executors.c.executor_id, executors.c.application_version).where(
                self._live(adopt_after)
            )
        )
        return {r[0]: r[1] for r in rows}

    async def executor_rows(self) -> list[dict[str, Any]]:
        """Every row of ``__agents_executors``, by column name."""
        conn = joined()
        return [dict(r) for r in (await conn.execute(sa.select(executors))).mappings().all()]

    async def live_identity(
        self, executor_id: str, adopt_after: float
    ) -> tuple[int | None, str | None] | None:
        """``(pid, hostname)`` of ``executor_id``'s row if it is live, else ``None``."""
        conn = joined()
        row = (
            await conn.execute(
                sa.select(executors.c.pid, executors.c.hostname).where(
                    executors.c.executor_id == executor_id, self._live(adopt_after)
                )
            )
        ).first()
        return None if row is None else (row.pid, row.hostname)

    async def upsert_executor(
        self,
        executor_id: str,
        version: str,
        hostname: str,
        pid: int,
    ) -> None:
        """Record ``executor_id`` as live from now: started, heartbeating, neither stopped nor
        adopted (a reused id's row is reset)."""
        conn = joined()
        values = {
            "application_version": version,
            "hostname": hostname,
            "pid": pid,
            "started_at": self._b.now(),
            "heartbeat_at": self._b.now(),
            "stopped_at": None,
            "adopted_by": None,
            "adopted_at": None,
        }
        await conn.execute(
            self._b.insert(executors)
            .values(executor_id=executor_id, **values)
            .on_conflict_do_update(index_elements=["executor_id"], set_=values)
        )

    async def mark_stopped(self, executor_id: str) -> None:
        """Mark the executor stopped: its parked turns are adoptable now."""
        conn = joined()
        await conn.execute(
            executors.update()
            .where(executors.c.executor_id == executor_id)
            .values(stopped_at=self._b.now())
        )

    async def beat(self, executor_id: str) -> tuple[bool, str | None]:
        """A heartbeat on the executor's row: ``(whether the row exists, who adopted it)``."""
        conn = joined()
        row = (
            await conn.execute(
                executors.update()
                .where(executors.c.executor_id == executor_id)
                .values(heartbeat_at=self._b.now(), stopped_at=None)
                .returning(executors.c.adopted_by)
            )
        ).first()
        return (False, None) if row is None else (True, row[0])

    async def clear_adoption(self, executor_id: str) -> None:
        """The executor's row is its own again: no adopter."""
        conn = joined()
        await conn.execute(
            executors.update()
            .where(executors.c.executor_id == executor_id)
            .values(adopted_by=None, adopted_at=None)
        )

    async def claim(
        self,
        executor_id: str,
        version: str,
        me: str,
        adopt_after: float,
    ) -> bool:
        """Compare-and-swap the dead executor's row to ``adopted_by = me``; ``True`` if we won.

        An executor with PENDING turns but no row (a release before the fleet existed) gets a
        stopped row first. A claim by an adopter that itself died can be taken over.
        """
        conn = joined()
        await conn.execute(
            self._b.insert(executors)
            .values(
                executor_id=executor_id,
                application_version=version,
                started_at=_EPOCH,
                heartbeat_at=_EPOCH,
                stopped_at=_EPOCH,
            )
            .on_conflict_do_nothing(index_elements=["executor_id"])
        )
        live_ids = sa.select(executors.c.executor_id).where(self._live(adopt_after))
        won = await conn.execute(
            executors.update()
            .where(
                executors.c.executor_id == executor_id,
                sa.or_(
                    executors.c.stopped_at.is_not(None),
                    executors.c.heartbeat_at <= self._b.ago(adopt_after),
                ),
                sa.or_(
                    executors.c.adopted_by.is_(None),
                    executors.c.adopted_by == me,
                    executors.c.adopted_by.not_in(live_ids.scalar_subquery()),
                ),
            )
            .values(adopted_by=me, adopted_at=self._b.now())
            .returning(executors.c.executor_id)
        )
        return won.first() is not None

    async def hand_over(self, executor_id: str, to_version: str) -> None:
        """The dead executor's row speaks for its relabelled turns: of ``to_version``, and free
        for any live process of it to adopt."""
        conn = joined()
        await conn.execute(
            executors.update()
            .where(executors.c.executor_id == executor_id)
            .values(application_version=to_version, adopted_by=None)
        )

    async def record(
        self,
        workflow_ids: Iterable[str],
        kind: str,
        from_executor: str,
        from_version: str,
        me: str,
        to_version: str,
    ) -> None:
        """One ``__agents_adoptions`` row per workflow taken over (``kind``: ``adopted`` or
        ``forwarded``)."""
        conn = joined()
        at = datetime.now(UTC)
        rows = [
            {
                "workflow_id": w,
                "kind": kind,
                "from_executor": from_executor,
                "from_version": from_version,
                "adopted_by": me,
                "to_version": to_version,
                "adopted_at": at,
            }
            for w in workflow_ids
        ]
        if rows:
            await conn.execute(adoptions.insert(), rows)

    async def adoptions_of(self, workflow_ids: list[str]) -> list[dict[str, Any]]:
        """The ``__agents_adoptions`` rows of these workflows, oldest first, by column name."""
        conn = joined()
        query = (
            sa.select(adoptions)
            .where(adoptions.c.workflow_id.in_(workflow_ids))
            .order_by(adoptions.c.adopted_at, adoptions.c.id)
        )
        return [dict(r) for r in (await conn.execute(query)).mappings().all()]
