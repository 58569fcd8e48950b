"""What the retention tests share: the rows a session holds, the prune command."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from helix_dbos.cli import main as cli_main
from helix_dbos.store.store import SessionStore

OURS = (
    "__agents_states",
    "__agents_messages",
    "__agents_events",
    "__agents_checkpoints",
    "__agents_usage",
    "__agents_approvals",
    "__agents_notifications",
)


async def rows_of(store: SessionStore, sid: str) -> dict[str, int]:
    """Rows of ``sid`` in each of our tables and in DBOS's (its workflows and their steps)."""
    found: dict[str, int] = {}
    dbos = "dbos." if store.dialect == "postgresql" else ""
    async with store.engine.connect() as conn:
        for table in OURS:
            found[table] = int(
                await conn.scalar(
                    sa.text(f"SELECT count(*) FROM {table} WHERE session_id = :s"), {"s": sid}
                )
                or 0
            )
        for table in ("workflow_status", "workflow_input", "operation_outputs"):
            found[table] = int(
                await conn.scalar(
                    sa.text(
                        f"SELECT count(*) FROM {dbos}{table}"
                        " WHERE substr(workflow_uuid, 1, :n) = :p"
                    ),
                    {"p": f"helix:{sid}:", "n": len(f"helix:{sid}:")},
                )
                or 0
            )
    return found


def run_cli(argv: list[str]) -> dict[str, Any]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(argv)
    assert code == 0, out.getvalue()
    parsed: dict[str, Any] = json.loads(out.getvalue())
    return parsed
