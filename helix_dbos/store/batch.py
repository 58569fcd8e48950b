"""Writes queued in a transaction and sent as ONE statement right before it commits (Postgres).

Inside a transaction bound by ``SessionStore.transact``, the writes whose caller needs nothing
back from the database are queued here instead of being sent one by one: new session rows,
compare-and-swaps of session rows, messages, usage rows, events, checkpoints, the
messages to DBOS workflows that must commit with them (``notify``), and the rows of the
notification outbox and the decision record (``append``, ``appended.py``). ``flush``
sends them all as one data-modifying statement (``WITH ... INSERT ... UPDATE ...``, every
table's rows as one ``jsonb_to_recordset`` parameter), and ``transact`` flushes before COMMIT.

What the one statement keeps of the writes sent one by one:

* Order: messages and usage rows are inserted in the order they were queued (their ids follow
  it); events carry the sequence numbers they would have had.
* Event sequences come from ``__agents_states.event_seq`` as before. Events are queued only
  for a session whose row this transaction holds (read ``FOR UPDATE``, created, or already
  bumped by an immediate append), so its ``event_seq`` is known and cannot move under us: the
  events get ``event_seq + 1 ...`` and the row's ``event_seq`` grows by their number. Or for
  a row whose compare-and-swap is queued without holding it (``SessionStore.update`` from a
  ``Prior`` read): the statement numbers those events from the ``event_seq`` its swap found,
  and a lost swap inserts none. For any other session the store appends at once, as before.
* A compare-and-swap that finds its row at another version fails the flush with
  ``StaleStateError`` (the transaction is then retried as a whole, as a lost race always was).
* A checkpoint's ``message_count`` counts the messages queued before it. Its pointer moves
  only forward (``write_checkpoint``'s rule), unless the compare-and-swap moved it already.
* Conflicts raise as before: a duplicate session id, checkpoint id or tool result fails the
  statement with ``IntegrityError``.

A statement is one snapshot: a part cannot see what another part writes, and Postgres applies
only one of two updates of the same row in one statement. So every queued write of one session
row is merged into one part (a new row, a compare-and-swap, or a bump of ``event_seq`` and the
checkpoint pointer), and where two writes cannot be merged the queue is flushed first. A read
in the transaction flushes the queue first when the queue holds writes to a table it reads
(``reads``), so the transaction always sees its own writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import StaleStateError
from . import dbos_messages
from . import row as session_row
from .appended import APPENDED, DECISIONS, OUTBOX
from .pg import fetch, fetch_last

__all__ = [
    "ALL",
    "CHECKPOINTS",
    "DECISIONS",
    "EVENTS",
    "MESSAGES",
    "NOTIFICATIONS",
    "OUTBOX",
    "STATES",
    "STATE_COLUMNS",
    "USAGE",
    "WriteBatch",
    "begin",
    "current_batch",
    "end",
    "settle",
]

STATES = "states"
MESSAGES = "messages"
USAGE = "usage"
EVENTS = "events"
CHECKPOINTS = "checkpoints"
NOTIFICATIONS = "notifications"
ALL: frozenset[str] = frozenset(
    {STATES, MESSAGES, USAGE, EVENTS, CHECKPOINTS, NOTIFICATIONS, OUTBOX, DECISIONS}
)


_batch: ContextVar[WriteBatch | None] = ContextVar("helix_store_batch", default=None)

#: The session row's writable columns, in the order of the statements below.
STATE_COLUMNS = session_row.WRITABLE
_STATE_DEFS = ", ".join(f"{c} {session_row.SQL_TYPES[c]}" for c in STATE_COLUMNS)

# Each part of the flush: its CTE, fed by one jsonb array parameter of the same name. A JSON
# null read into a jsonb column is SQL NULL, as the store writes an absent value.
_PARTS: dict[str, str] = {
    "new_states": f"""
    new_states AS (
        INSERT INTO __agents_states (session_id, version, event_seq, created_at, updated_at,
            {", ".join(STATE_COLUMNS)})
        SELECT r.session_id, 0, r.event_seq, r.created_at, r.created_at,
            {", ".join(f"r.{c}" for c in STATE_COLUMNS)}
        FROM jsonb_to_recordset(%(new_states)s::jsonb) AS r(session_id text, event_seq bigint,
            created_at timestamptz, {_STATE_DEFS})
        WHERE TRUE /*guard*/
    )""",
    "cas_states": f"""
    cas_states AS (
        UPDATE __agents_states AS s SET
            version = s.version + 1, updated_at = r.updated_at,
            event_seq = s.event_seq + r.seq_delta,
            {", ".join(f"{c} = r.{c}" for c in STATE_COLUMNS)}
        FROM jsonb_to_recordset(%(cas_states)s::jsonb) AS r(session_id text, version integer,
            updated_at timestamptz, seq_delta bigint, {_STATE_DEFS})
        WHERE s.session_id = r.session_id AND s.version = r.version
        RETURNING s.session_id, s.event_seq, s.event_seq - r.seq_delta AS base
    )""",
    # A bump: events appended to a row nothing else changes, and/or a checkpoint pointer
    # moved forward only (never back past a newer checkpoint: write_checkpoint's rule).
    "bump_states": """
    bump_states AS (
        UPDATE __agents_states AS s SET
            event_seq = s.event_seq + r.seq_delta,
            latest_checkpoint_id = CASE
                WHEN r.checkpoint_id IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM __agents_checkpoints AS c
                    WHERE c.checkpoint_id = s.latest_checkpoint_id
                      AND c.created_at > r.checkpoint_at)
                THEN r.checkpoint_id ELSE s.latest_checkpoint_id END
        FROM jsonb_to_recordset(%(bump_states)s::jsonb) AS r(session_id text, seq_delta bigint,
            checkpoint_id text, checkpoint_at timestamptz)
        WHERE s.session_id = r.session_id /*guard*/
    )""",
    "messages": """
    new_messages AS (
        INSERT INTO __agents_messages (session_id, role, tool_call_id, content, run_id,
            created_at)
        SELECT r.session_id, r.role, r.tool_call_id, r.content, r.run_id, r.created_at
        FROM jsonb_to_recordset(%(messages)s::jsonb) AS r(i integer, session_id text,
            role text, tool_call_id text, content jsonb, run_id text, created_at timestamptz)
        WHERE TRUE /*guard*/
        ORDER BY r.i
    )""",
    "usage": """
    new_usage AS (
        INSERT INTO __agents_usage (session_id, run_id, kind, source_type, source_name, data,
            timestamp, dedupe_key)
        SELECT r.session_id, r.run_id, r.kind, r.source_type, r.source_name, r.data,
            r.timestamp, r.dedupe_key
        FROM jsonb_to_recordset(%(usage)s::jsonb) AS r(i integer, session_id text,
            run_id text, kind text, source_type text, source_name text, data jsonb,
            timestamp bigint, dedupe_key text)
        WHERE TRUE /*guard*/
        ORDER BY r.i
        ON CONFLICT (dedupe_key) DO NOTHING
    )""",
    # An event of a held row carries its sequence; one of a row this transaction swaps without
    # holding it (read unlocked, see ``save``) carries its place ``k`` among that row's new
    # events, numbered from the row's ``event_seq`` as the swap found it (``_EVENTS_SWAPPED``,
    # used when the statement swaps rows). A swap that lost inserts none of its events (and
    # fails the flush).
    "events": """
    new_events AS (
        INSERT INTO __agents_events (session_id, sequence, run_id, type, data, created_at)
        SELECT r.session_id, r.sequence, r.run_id, r.type, r.data, r.created_at
        FROM jsonb_to_recordset(%(events)s::jsonb) AS r(session_id text, sequence bigint,
            run_id text, type text, data jsonb, created_at timestamptz)
        WHERE TRUE /*guard*/
        ORDER BY r.session_id, r.sequence
    )""",
    # message_count: the messages this statement does not see yet (queued before the
    # checkpoint) are added to those it sees.
    "checkpoints": """
    new_checkpoints AS (
        INSERT INTO __agents_checkpoints (checkpoint_id, session_id, run_id, step_count,
            message_count, state, created_at)
        SELECT r.checkpoint_id, r.session_id, r.run_id, r.step_count,
            COALESCE(r.message_count, r.queued_messages + (
                SELECT count(*) FROM __agents_messages AS m WHERE m.session_id = r.session_id)),
            r.state, r.created_at
        FROM jsonb_to_recordset(%(checkpoints)s::jsonb) AS r(checkpoint_id text,
            session_id text, run_id text, step_count integer, message_count integer,
            queued_messages integer, state jsonb, created_at timestamptz)
        WHERE TRUE /*guard*/
    )""",
    # A message to a DBOS workflow, in DBOS's row format (``dbos_messages``).
    "notifications": dbos_messages.INSERT_CTE,
    **APPENDED,
}
_EVENTS_SWAPPED = """
    new_events AS (
        INSERT INTO __agents_events (session_id, sequence, run_id, type, data, created_at)
        SELECT r.session_id, COALESCE(r.sequence, c.base + r.k), r.run_id, r.type, r.data,
            r.created_at
        FROM jsonb_to_recordset(%(events)s::jsonb) AS r(session_id text, sequence bigint,
            k bigint, run_id text, type text, data jsonb, created_at timestamptz)
        LEFT JOIN cas_states AS c ON r.sequence IS NULL AND c.session_id = r.session_id
        WHERE (r.sequence IS NOT NULL OR c.session_id IS NOT NULL) /*guard*/
        ORDER BY 1, 2
    )"""
#: In a statement that swaps rows, every other part writes only if every swap landed. A
#: statement of one swap therefore holds on its own, with or without a transaction around it
#: (``SessionStore.transact`` sends such a lone flush without one); the swaps themselves are
#: one part, where one that matched lands though another lost, so two or more swaps are sent
#: in a transaction (``flush``), which the lost race rolls back.
_GUARD = "/*guard*/"
_SWAPS_LANDED = "AND (SELECT count(*) FROM cas_states) = %(swaps)s::bigint"
_statements: dict[tuple[str, ...], str] = {}


def _statement(parts: tuple[str, ...]) -> str:
    """The flush statement of these parts (built once per combination)."""
    sql = _statements.get(parts)
    if sql is None:
        swaps = "cas_states" in parts
        tail = "SELECT session_id, event_seq FROM cas_states" if swaps else "SELECT 1"
        sql = (
            "WITH"
            + ",".join(_EVENTS_SWAPPED if p == "events" and swaps else _PARTS[p] for p in parts)
            + "\n"
            + tail
        ).replace(_GUARD, _SWAPS_LANDED if swaps else "")
        _statements[parts] = sql
    return sql


@dataclass(slots=True)
class _Row:
    """The queued writes of one session row, merged into one part of the statement."""

    new: dict[str, Any] | None = None
    cas: dict[str, Any] | None = None
    seq_delta: int = 0
    checkpoint: tuple[str, str] | None = None  # (checkpoint id, its created_at, ISO)


def _state_parts(rows: dict[str, _Row]) -> tuple[list[Any], list[Any], list[Any]]:
    """The session rows' parts of the statement: compare-and-swaps (each with its sequence
    delta), inserts, and bumps of the rows only their sequence or checkpoint changed."""
    cas = []
    for r in rows.values():
        if r.cas is not None:
            r.cas["seq_delta"] = r.seq_delta
            cas.append(r.cas)
    new = [r.new for r in rows.values() if r.new is not None]
    bump = [
        {
            "session_id": sid,
            "seq_delta": r.seq_delta,
            "checkpoint_id": r.checkpoint[0] if r.checkpoint else None,
            "checkpoint_at": r.checkpoint[1] if r.checkpoint else None,
        }
        for sid, r in rows.items()
        if r.new is None and r.cas is None
    ]
    return cas, new, bump


class WriteBatch:
    """The writes queued in one transaction attempt (see the module's docstring)."""

    __slots__ = (
        "_checkpoints",
        "_dirty",
        "_events",
        "_messages",
        "_notifications",
        "_appended",
        "_queued_messages",
        "_rows",
        "_seq",
        "_usage",
        "conn",
        "evented",
    )

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self._rows: dict[str, _Row] = {}
        self._messages: list[dict[str, Any]] = []
        self._usage: list[dict[str, Any]] = []
        self._events: list[dict[str, Any]] = []
        self._checkpoints: list[dict[str, Any]] = []
        self._notifications: list[dict[str, Any]] = []
        self._appended: dict[str, list[dict[str, Any]]] = {}
        self._queued_messages: dict[str, int] = {}
        self._seq: dict[str, int] = {}
        self._dirty: set[str] = set()
        self.evented: set[str] = set()
        """The sessions whose events this transaction writes (``SessionStore.on_events``)."""

    # -- what the transaction holds ---------------------------------------------------------

    def hold(self, session_id: str, event_seq: int) -> None:
        """The transaction holds ``session_id``'s row (locked, or written by it) at
        ``event_seq`` (queued events included)."""
        self._seq[session_id] = event_seq

    def held_seq(self, session_id: str) -> int | None:
        """The row's ``event_seq`` with the queued events, if the transaction holds it."""
        return self._seq.get(session_id)

    def dirty(self, tables: Iterable[str]) -> bool:
        """Whether writes to any of ``tables`` are queued."""
        return not self._dirty.isdisjoint(tables)

    # -- queueing ---------------------------------------------------------------------------

    async def create(self, session_id: str, values: dict[str, Any]) -> None:
        """Queue a new session row (``values``: its columns, ``created_at`` in ISO)."""
        if session_id in self._rows:
            await self.flush()
        self._rows[session_id] = _Row(new={"session_id": session_id, "event_seq": 0, **values})
        self._seq[session_id] = 0
        self._dirty.add(STATES)

    async def save(self, session_id: str, version: int, values: dict[str, Any]) -> None:
        """Queue a compare-and-swap of the row from ``version`` to ``values``."""
        row = self._rows.get(session_id)
        if row is not None and (row.new is not None or row.cas is not None or row.checkpoint):
            await self.flush()
            row = None
        if row is None:
            row = self._rows[session_id] = _Row()
        row.cas = {"session_id": session_id, "version": version, **values}
        self._dirty.add(STATES)

    def can_queue_events(self, session_id: str) -> bool:
        """Whether events of ``session_id`` can be queued: the transaction holds its row, or
        swaps it in the queue (``events``)."""
        if session_id in self._seq:
            return True
        row = self._rows.get(session_id)
        return row is not None and row.cas is not None

    def events(self, session_id: str, rows: list[dict[str, Any]]) -> int | None:
        """Queue events of a held row, or of a row whose compare-and-swap is queued (``rows``
        without sequences); the last sequence, if known before the flush."""
        entry = self._rows.get(session_id)
        base = self._seq.get(session_id)
        if base is None:
            # Not held: the swap's statement numbers them from the row it swaps.
            assert entry is not None and entry.cas is not None, "events of an unheld row"
            for i, row in enumerate(rows, start=entry.seq_delta + 1):
                row["k"] = i
            self._events.extend(rows)
            entry.seq_delta += len(rows)
            self._dirty.update((STATES, EVENTS))
            return None
        for i, row in enumerate(rows, start=1):
            row["sequence"] = base + i
        self._events.extend(rows)
        last = self._seq[session_id] = base + len(rows)
        if entry is None:
            entry = self._rows[session_id] = _Row()
        if entry.new is not None:
            entry.new["event_seq"] += len(rows)
        else:
            entry.seq_delta += len(rows)
        self._dirty.update((STATES, EVENTS))
        return last

    def messages(self, session_id: str, rows: list[dict[str, Any]]) -> None:
        """Queue messages, in order."""
        start = len(self._messages)
        for i, row in enumerate(rows, start=start):
            row["i"] = i
        self._messages.extend(rows)
        self._queued_messages[session_id] = self._queued_messages.get(session_id, 0) + len(rows)
        self._dirty.add(MESSAGES)

    def usage(self, rows: list[dict[str, Any]]) -> None:
        """Queue usage rows, in order."""
        start = len(self._usage)
        for i, row in enumerate(rows, start=start):
            row["i"] = i
        self._usage.extend(rows)
        self._dirty.add(USAGE)

    def notify(self, workflow_id: str, topic: str, message: Any, idempotency_key: str) -> None:
        """Queue ``message`` (JSON-serializable) to DBOS workflow ``workflow_id`` on ``topic``,
        as ``DBOS.send(..., idempotency_key=...)`` would write it (``dbos_messages``): a second
        message with the same key is dropped, as DBOS drops it."""
        self._notifications.append(
            dbos_messages.message_row(
                workflow_id, topic, message, idempotency_key, len(self._notifications)
            )
        )
        self._dirty.add(NOTIFICATIONS)

    def append(self, part: str, rows: list[dict[str, Any]]) -> None:
        """Queue rows of an insert-only ``part`` (``appended.py``), in order."""
        queued = self._appended.setdefault(part, [])
        for row in rows:
            queued.append({**row, "i": len(queued)})
        self._dirty.add(part)

    async def checkpoint(self, values: dict[str, Any], *, pointed: bool) -> None:
        """Queue a checkpoint row; unless ``pointed``, also its session's pointer (forward
        only). ``values["message_count"]`` ``None``: the session's messages at this point."""
        session_id = values["session_id"]
        if not pointed:
            row = self._rows.get(session_id)
            if row is not None and (
                row.new is not None or row.cas is not None or row.checkpoint is not None
            ):
                await self.flush()  # a pointer must be read after those writes
                row = None
            if row is None:
                row = self._rows[session_id] = _Row()
            row.checkpoint = (values["checkpoint_id"], values["created_at"])
            self._dirty.add(STATES)
        values["queued_messages"] = self._queued_messages.get(session_id, 0)
        self._checkpoints.append(values)
        self._dirty.add(CHECKPOINTS)

    # -- sending ----------------------------------------------------------------------------

    async def flush(self, *, last: bool = False) -> None:
        """Send every queued write as one statement, and empty the queue. ``last``: the
        transaction sends nothing after it (then, if it sent nothing before it either and the
        statement swaps at most one row, it goes without a transaction: see ``pg.fetch_last``).

        Raises:
            StaleStateError: a compare-and-swap found its row at another version.
            IntegrityError: a duplicate session id, checkpoint id or tool result, or a
                message to a workflow that does not exist.
        """
        if not self._dirty:
            return
        params: dict[str, Any] = {}
        cas, new, bump = _state_parts(self._rows)
        for name, rows in (
            ("cas_states", cas),  # first: the other parts may refer to it
            ("new_states", new),
            ("bump_states", bump),
            ("messages", self._messages),
            ("usage", self._usage),
            ("events", self._events),
            ("checkpoints", self._checkpoints),
            ("notifications", self._notifications),
            *((part, self._appended.get(part)) for part in APPENDED),
        ):
            if rows:
                params[name] = json.dumps(rows, separators=(",", ":"))
        expected = {r["session_id"]: r["version"] for r in cas}
        sql = _statement(tuple(params))
        if cas:
            params["swaps"] = len(cas)
        self._rows, self._messages, self._usage, self._events = {}, [], [], []
        self._checkpoints, self._notifications, self._queued_messages = [], [], {}
        self._appended = {}
        self._dirty = set()
        # Alone (no BEGIN), a swap that matched would land though another one lost (_GUARD).
        alone = last and len(cas) <= 1
        swapped = await (fetch_last if alone else fetch)(self.conn, sql, params)
        if expected:
            done = {row[0]: row[1] for row in swapped}
            for sid, version in expected.items():
                if sid not in done:
                    raise StaleStateError(
                        f"Session {sid!r} changed since version {version}", sessionId=sid
                    )
            # Swapped rows are locked by this transaction now: their sequences are known.
            self._seq.update(done)


def begin(conn: AsyncConnection) -> tuple[WriteBatch, Token[WriteBatch | None]]:
    """Queue the writes of ``conn``'s transaction (bound to the task) from now on; ``end``
    with the token."""
    batch = WriteBatch(conn)
    return batch, _batch.set(batch)


def end(token: Token[WriteBatch | None]) -> None:
    """Stop queueing (what was queued and not flushed is dropped with its transaction)."""
    _batch.reset(token)


def current_batch(conn: AsyncConnection | None) -> WriteBatch | None:
    """The batch of the bound transaction, if ``conn`` is it (or ``None``: the bound one)."""
    batch = _batch.get()
    if batch is None or (conn is not None and conn is not batch.conn):
        return None
    return batch


async def settle(conn: AsyncConnection | None, reads: Iterable[str] = ALL) -> None:
    """Before a statement on ``conn`` that reads ``reads``: flush what it would not see."""
    batch = current_batch(conn)
    if batch is not None and batch.dirty(reads):
        await batch.flush()
