"""What waits right now, by tool: the figures the live metrics read when scraped.

One statement, in parts that each read an index:

* the pending approvals are the inbox's (``__agents_approvals``, kept by the triggers of
  revision 0008, listed until their deadline): all of them, by tool, from the counts that the
  triggers of revision 0015 keep exact in ``__agents_approval_counts`` (a few rows, however
  many wait), less those already past their deadline (found on the deadline index: the few
  whose turn has not yet woken to settle them); the oldest one still before its deadline,
  first on the age index;
* the pending client calls: the pending maps of the session rows written within the longest
  client deadline (``client_window_ms``), found on the ``updated_at`` index. A call that is
  still waiting was parked less than its deadline ago, and parking it wrote its session's row,
  so no row written earlier can hold one: the scan reads the recently parked sessions, not
  every session parked on an approval for days.

A call counts while it has no stored answer, on its session's current run, in a live session,
and before its deadline: what the inbox lists, and what a submit could still answer.

The counts are exact: a scrape sees them as of its snapshot, as it would see the inbox's rows.
On Postgres each database connection that writes approvals adds to a slot of its own (so no
two writers wait on one row); when a scrape finds more than ``MERGE_ABOVE`` slot rows it
merges them into slot 0 (``merge_approval_counts``), which changes no sum.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from ..core.clock import now_ms
from ..observability.approval_metrics import PendingFigures
from .dialect import Backend
from .store import SessionStore

__all__ = [
    "CLOCK_SLACK_MS",
    "MERGE_ABOVE",
    "figures_sql",
    "merge_approval_counts",
    "pending_figures",
]

#: Added to the client window: the clocks of the processes that write rows may disagree.
CLOCK_SLACK_MS = 60_000

#: A scrape that finds more rows of counts than this merges them (``merge_approval_counts``):
#: a slot is a database connection, so they pile up only as connections come and go.
MERGE_ABOVE = 256

#: ``{lapsed_from}``: the backend's ``lapsed_approvals_from`` (SQLite is told which index to
#: take). The client calls' part is the backend's ``client_calls`` (JSON differs).
_APPROVALS = """
SELECT 'approval' AS part, tool_name AS tool, CAST(sum(n) AS BIGINT) AS n,
    CAST(NULL AS BIGINT) AS oldest
FROM __agents_approval_counts
GROUP BY tool_name
UNION ALL
SELECT 'slots', NULL, count(*), CAST(NULL AS BIGINT)
FROM __agents_approval_counts
UNION ALL
SELECT 'lapsed', tool_name, count(*), CAST(NULL AS BIGINT)
FROM {lapsed_from}
WHERE deadline_at <= :now
GROUP BY tool_name
UNION ALL
SELECT 'oldest', NULL, 0, min(registered_at)
FROM __agents_approvals
WHERE deadline_at > :now
"""


def figures_sql(backend: Backend) -> str:
    """The one statement of ``pending_figures`` on ``backend`` (parameters ``:now``, epoch ms,
    and ``:since``, the oldest session row a pending client call can be on); it runs after the
    backend's ``figures_plan``."""
    approvals_part = _APPROVALS.format(lapsed_from=backend.lapsed_approvals_from)
    return f"{approvals_part} UNION ALL {backend.client_calls}"


async def pending_figures(store: SessionStore, client_window_ms: int) -> PendingFigures:
    """The unanswered approvals and client calls before their deadlines, counted by tool, and
    when the oldest such approval was parked.

    ``client_window_ms``: the longest deadline a client call can have (the runtime passes its
    client tools' longest); a client call of a tool with a longer one is counted only while its
    session's row was written within the window.
    """
    now = now_ms()
    since = datetime.fromtimestamp((now - client_window_ms - CLOCK_SLACK_MS) / 1000, UTC)
    backend = store.backend
    query = sa.text(figures_sql(backend)).bindparams(
        sa.bindparam("since", since, type_=sa.DateTime(timezone=True)), now=now
    )
    async with store.transaction() as conn:
        for setting in backend.figures_plan:
            await conn.execute(sa.text(setting))
        rows = (await conn.execute(query)).all()
    approvals: dict[str, int] = {}
    clients_by_tool: dict[str, int] = {}
    oldest: int | None = None
    for part, tool, count, at in rows:
        if part == "slots":
            if backend.merge_approval_counts is not None and int(count) > MERGE_ABOVE:
                await merge_approval_counts(store)
        elif part == "approval":
            approvals[tool] = approvals.get(tool, 0) + int(count)
        elif part == "lapsed":
            approvals[tool] = approvals.get(tool, 0) - int(count)
        elif part == "client":
            clients_by_tool[tool] = int(count)
        elif at is not None:
            oldest = int(at)
    return PendingFigures(
        approvals={tool: n for tool, n in approvals.items() if n > 0},
        client_calls=clients_by_tool,
        oldest_approval_at=oldest,
    )


async def merge_approval_counts(store: SessionStore) -> None:
    """Fold the connections' slots of the approval counts into slot 0 (Postgres; SQLite has
    only slot 0). Every sum stays what it was: the rows deleted are the rows added, in one
    statement. A slot a writer holds now (its transaction has changed it) is skipped, not
    waited for, so a merge never makes a park wait on it or deadlock with it."""
    statement = store.backend.merge_approval_counts
    if statement is None:
        return
    async with store.transaction() as conn:
        await conn.execute(sa.text(statement))
