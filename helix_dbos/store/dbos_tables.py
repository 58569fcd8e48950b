"""DBOS's own tables, read and written as the fleet needs them: the raw SQL on ``workflow_status``.

DBOS owns the table (its schema is ``dbos`` on Postgres, or ``dbos_system_schema``; SQLite has
no schemas). The fleet counts the PENDING turns per executor and version, relabels a dead
executor's turns to the version that replays them, and finds the workflow of a session's
turn; the launch counts what DBOS is about to recover. The statements name only the columns
DBOS's recovery itself relies on (``status``, ``executor_id``, ``application_version``,
``name``, ``workflow_uuid``, ``application_name``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from .engine import StoreEngine, joined

if TYPE_CHECKING:
    from .dialect import Backend

__all__ = ["DbosTables"]


class DbosTables:
    """DBOS's tables on one backend (``SessionStore.dbos``)."""

    __slots__ = ("_b", "_db")

    def __init__(self, backend: Backend, db: StoreEngine) -> None:
        self._b = backend
        self._db = db

    def _workflows(self, schema: str) -> str:
        """DBOS's ``workflow_status`` table as SQL (schema-qualified on Postgres)."""
        return self._b.dbos_table(schema, "workflow_status")

    async def pending_groups(
        self, schema: str, workflows: tuple[str, str]
    ) -> list[tuple[str, str, int]]:
        """``(executor_id, application_version, count)`` of PENDING workflows named ``workflows``
        (the turn's and the continuation's), and of ENQUEUED ones: a recovery cut short by its
        process's exit leaves them enqueued for their version."""
        conn = joined()
        rows = await conn.execute(
            sa.text(
                f"SELECT executor_id, application_version, COUNT(*) FROM "
                f"{self._workflows(schema)} WHERE status IN ('PENDING', 'ENQUEUED') "
                "AND name IN (:turn, :continuation) "
                "GROUP BY executor_id, application_version"
            ),
            {"turn": workflows[0], "continuation": workflows[1]},
        )
        return [(r[0] or "", r[1] or "", int(r[2])) for r in rows]

    async def pending_groups_if_any(self, workflows: tuple[str, str]) -> list[tuple[str, str, int]]:
        """``pending_groups``, or none when DBOS has not created its tables here yet."""
        try:
            async with self._db.reading():
                return await self.pending_groups("dbos", workflows)
        except sa.exc.DBAPIError:
            return []

    async def relabel(
        self,
        schema: str,
        executor_id: str,
        from_version: str,
        to_version: str,
    ) -> list[str]:
        """Move one dead executor's PENDING turns of ``from_version`` to ``to_version``; the
        workflow ids moved.

        One UPDATE: rows another transaction relabelled first no longer match, so each workflow
        moves once.
        """
        conn = joined()
        rows = await conn.execute(
            sa.text(
                f"UPDATE {self._workflows(schema)} SET application_version = :to "
                "WHERE status IN ('PENDING', 'ENQUEUED') AND executor_id = :executor "
                "AND application_version = :from RETURNING workflow_uuid"
            ),
            {"to": to_version, "executor": executor_id, "from": from_version},
        )
        return [r[0] for r in rows]

    async def pending_agent_types(
        self, schema: str, executor_id: str, workflows: tuple[str, str]
    ) -> set[str]:
        """The agent types of one executor's PENDING (or ENQUEUED) workflows named ``workflows``:
        those of the sessions whose row names the workflow (a workflow no row names is left
        out)."""
        conn = joined()
        rows = await conn.execute(
            sa.text(
                f"SELECT DISTINCT s.agent_type FROM {self._workflows(schema)} w "
                "JOIN __agents_states s ON s.workflow_id = w.workflow_uuid "
                "WHERE w.status IN ('PENDING', 'ENQUEUED') AND w.executor_id = :executor "
                "AND w.name IN (:turn, :continuation)"
            ),
            {"executor": executor_id, "turn": workflows[0], "continuation": workflows[1]},
        )
        return {r[0] for r in rows}

    async def executors_of(self, schema: str, workflow_ids: list[str]) -> set[str]:
        """The executors that own these workflows."""
        conn = joined()
        rows = await conn.execute(
            sa.text(
                f"SELECT DISTINCT executor_id FROM {self._workflows(schema)}"
                " WHERE workflow_uuid IN :ids"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": workflow_ids},
        )
        return {r[0] for r in rows}

    async def session_turn(self, schema: str, session_id: str) -> tuple[Any, ...] | None:
        """The workflow the session's row names: ``(workflow_id, status, executor_id,
        application_version)`` as DBOS records them, or ``None`` (no such session, or no such
        workflow)."""
        conn = joined()
        row = (
            await conn.execute(
                sa.text(
                    "SELECT w.workflow_uuid, w.status, w.executor_id, w.application_version "
                    f"FROM __agents_states s JOIN {self._workflows(schema)} w "
                    "ON w.workflow_uuid = s.workflow_id WHERE s.session_id = :sid"
                ),
                {"sid": session_id},
            )
        ).first()
        return None if row is None else tuple(row)

    async def count_recoverable(
        self, schema: str, executor_id: str, version: str, app_name: str
    ) -> int:
        """DBOS's recovery query at launch, counted: PENDING workflows of this executor id and
        application version, of this application or none.

        ``0`` on a database where DBOS has not created its tables yet (a first launch).
        """
        sql = sa.text(
            f"SELECT COUNT(*) FROM {self._workflows(schema)} "
            "WHERE status = 'PENDING' AND executor_id = :me AND application_version = :version "
            "AND (application_name = :app OR application_name IS NULL)"
        )
        params = {"me": executor_id, "version": version, "app": app_name}
        try:
            async with self._db.engine.connect() as conn:
                return int((await conn.execute(sql, params)).scalar_one())
        except sa.exc.DBAPIError:
            return 0  # no workflow table yet: nothing to recover
