"""Bulk loader: many hibernated sessions, each with exactly the rows a real park and hibernation
write (ours and DBOS's), in minutes instead of the hours real parks take.

One session of the agent is parked for real (``AgentRuntime.start`` until its workflow returns
``hibernated``); its rows are read back with ``COPY ... TO`` from every table that holds rows
of it: ``__agents_states``, ``__agents_checkpoints``, ``__agents_events``,
``__agents_messages``, ``__agents_usage``, ``__agents_approvals``, ``__agents_notifications``
and DBOS's ``workflow_status``, ``workflow_input``, ``workflow_output``, ``operation_outputs``,
``notifications``, ``workflow_events``, ``workflow_events_history`` and ``streams``. Each
loaded session is that template with, in every column (JSON and DBOS's pickled inputs and
outputs included):

- its own ids: the session id, the run id (and the workflow ids made of them), and the client
  call's id as the scripted model derives it from them (``llm/scripted.py``);
- its own times: every timestamp, epoch millisecond and DBOS's epoch-second sleep output moved
  by one offset, so session ``i`` parked ``spread * (i + 1) / n`` seconds before the template
  and its deadline (the same distance after its park) falls that much earlier;
- its own ``creator_xid`` (a fresh uuid, as DBOS gives each workflow);
- serial ids (a message's, a usage row's) from their sequences;
- with ``--tenants``, its own owner: session ``i`` belongs to tenant ``i % tenants`` and one of
  ``--principals`` principals of it (the template parks as ``user000@tenant00`` of
  ``tenant00``; the names keep its length, so DBOS's pickles stay valid).

The rows go in with ``COPY ... FROM`` in batches, one transaction per batch. The inbox's rows
(``__agents_approvals``) are not copied: the triggers of revision 0008 write them from the
session row, as they do for a real park. Nothing else is written: a loaded session has no row
a real one lacks and lacks none it has
(``tests/runtime/test_bulk_park.py`` compares them column by column, then answers a loaded
session through the normal submit and sees its turn complete).

    .venv/bin/python bench/bulk_park.py --url postgresql://... --sessions 1000000 [--agent cold]
        [--agent pay,ops,admin --tenants 10 --principals 100]

The database must be migrated; the agents are ``hibernation.py``'s (``--agent`` names one, or
several: the sessions are shared out among them; ``pay``, ``ops`` and ``admin`` wait on an
approval, the others on a client call).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import hashlib
import multiprocessing
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

#: (schema, table, the column naming the session): every table a park writes to.
TABLES: list[tuple[str, str, str]] = [
    ("public", "__agents_states", "session_id"),
    ("public", "__agents_checkpoints", "session_id"),
    ("public", "__agents_events", "session_id"),
    ("public", "__agents_messages", "session_id"),
    ("public", "__agents_usage", "session_id"),
    ("public", "__agents_approvals", "session_id"),
    ("public", "__agents_notifications", "session_id"),
    ("dbos", "workflow_status", "workflow_uuid"),
    ("dbos", "workflow_input", "workflow_uuid"),
    ("dbos", "workflow_output", "workflow_uuid"),
    ("dbos", "operation_outputs", "workflow_uuid"),
    ("dbos", "notifications", "destination_uuid"),
    ("dbos", "workflow_events", "workflow_uuid"),
    ("dbos", "workflow_events_history", "workflow_uuid"),
    ("dbos", "streams", "workflow_uuid"),
]

_MS = re.compile(r"(?<![0-9A-Za-z._])1[0-9]{12}(?![0-9A-Za-z])")
_SECONDS = re.compile(r"(?<![0-9A-Za-z._])1[0-9]{9}\.[0-9]+(?![0-9A-Za-z])")
_STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\+00")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_CALL = re.compile(r"call_[0-9a-f]{16}")
_WINDOW_MS = 10 * 86_400_000
"""An epoch-millisecond number this close to the template's park is one of its times."""
#: Tables whose rows a trigger writes from the session row: not copied.
TRIGGERED = {("public", "__agents_approvals")}
#: The template's owner, and the loaded sessions' owners (the same lengths).
TEMPLATE_OWNER = ("user000@tenant00", "tenant00")


def owner(i: int, tenants: int, principals: int) -> tuple[str, str]:
    """Session ``i``'s (principal, tenant) among ``tenants`` x ``principals``."""
    tenant = i % tenants
    principal = (i // tenants) % principals
    return f"user{principal:03d}@tenant{tenant:02d}", f"tenant{tenant:02d}"


# -- the template -------------------------------------------------------------------------


@dataclass
class Field:
    """One column of a template row: literal text, or what each session makes of it."""

    kind: str  # "text" | "ms" | "seconds" | "stamp" | "pickle" | "uuid" | "mixed"
    value: Any
    parts: list[tuple[str, Any]] = field(default_factory=list)
    """For ``mixed``: literal text and times, in order."""
    constant: bool | None = None
    """Literal text that no session changes (``_constant``)."""


@dataclass
class Template:
    """One really parked session: its ids, when it parked, and its rows as COPY text."""

    session_id: str
    run_id: str
    calls: dict[str, tuple[int, int]]
    """The client call ids, each with the (message count, index) the scripted model hashed."""
    parked_ms: int
    rows: dict[tuple[str, str], tuple[list[str], list[list[Field]]]]
    """(schema, table) -> (the columns copied, the rows' fields)."""


def _call_seed(call_id: str, session_id: str, run_id: str) -> tuple[int, int]:
    for count in range(64):
        for index in range(16):
            seed = f"{session_id}:{run_id}:{count}:{index}"
            if "call_" + hashlib.sha256(seed.encode()).hexdigest()[:16] == call_id:
                return count, index
    raise ValueError(f"{call_id} is not the scripted model's id of a call of this run")


def call_id(session_id: str, run_id: str, count: int, index: int) -> str:
    """The scripted model's call id (``llm/scripted.py``)."""
    seed = f"{session_id}:{run_id}:{count}:{index}"
    return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:16]


def _times_in(text: str, parked_ms: int) -> list[tuple[str, Any]]:
    """``text`` cut into literal parts and the times in it (ms, seconds, timestamps)."""
    found: list[tuple[int, int, str, Any]] = []
    for m in _MS.finditer(text):
        if abs(int(m.group()) - parked_ms) < _WINDOW_MS:
            found.append((m.start(), m.end(), "ms", int(m.group())))
    for m in _SECONDS.finditer(text):
        if abs(float(m.group()) * 1000 - parked_ms) < _WINDOW_MS:
            found.append((m.start(), m.end(), "seconds", m.group()))
    for m in _STAMP.finditer(text):
        found.append((m.start(), m.end(), "stamp", datetime.fromisoformat(m.group() + ":00")))
    found.sort()
    parts: list[tuple[str, Any]] = []
    at = 0
    for start, end, kind, value in found:
        parts.append(("text", text[at:start]))
        parts.append((kind, value))
        at = end
    parts.append(("text", text[at:]))
    return parts


def _field(text: str, column: str, ids: list[str], parked_ms: int) -> Field:
    if text == "\\N":
        return Field("text", text)
    if column == "creator_xid" and _UUID.match(text):
        return Field("uuid", text)
    if not any(i in text for i in ids) and len(text) >= 8:
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if any(i.encode() in raw for i in ids):
            return Field("pickle", raw)
    parts = _times_in(text, parked_ms)
    if len(parts) == 1:
        return Field("text", text)
    return Field("mixed", None, parts)


def _serial_columns(conn: psycopg.Connection[Any], schema: str, table: str) -> set[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
        " AND table_name = %s AND (column_default LIKE 'nextval%%' OR is_identity = 'YES')",
        (schema, table),
    ).fetchall()
    return {r[0] for r in rows}


def _columns(conn: psycopg.Connection[Any], schema: str, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
        " AND table_name = %s ORDER BY ordinal_position",
        (schema, table),
    ).fetchall()
    serial = _serial_columns(conn, schema, table)
    return [r[0] for r in rows if r[0] not in serial]


def _copy_out(conn: psycopg.Connection[Any], sql: str) -> list[str]:
    data = bytearray()
    with conn.cursor().copy(sql) as copy:
        for chunk in copy:
            data += chunk
    return [line for line in data.decode().split("\n") if line]


def read_template(url: str, session_id: str) -> Template:
    """The rows of ``session_id`` (a session whose turn hibernated) as a template."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        row = conn.execute(
            "SELECT run_id, (metadata -> 'hibernated' ->> 'at')::bigint, workflow_id"
            " FROM __agents_states WHERE session_id = %s",
            (session_id,),
        ).fetchone()
        assert row is not None and row[1] is not None, f"{session_id} is not hibernated"
        run_id, parked_ms = str(row[0]), int(row[1])
        ids = [session_id, run_id]
        rows: dict[tuple[str, str], tuple[list[str], list[list[Field]]]] = {}
        calls: dict[str, tuple[int, int]] = {}
        for schema, table, key in TABLES:
            columns = _columns(conn, schema, table)
            listed = ", ".join(f'"{c}"' for c in columns)
            where = (
                f"\"{key}\" = '{session_id}'"
                if schema == "public"
                else f"\"{key}\" LIKE 'helix:{session_id}:%'"
            )
            lines = _copy_out(
                conn, f'COPY (SELECT {listed} FROM "{schema}"."{table}" WHERE {where}) TO STDOUT'
            )
            for line in lines:
                for found in _CALL.findall(line):
                    calls.setdefault(found, _call_seed(found, session_id, run_id))
            parsed = [
                [
                    _field(t, c, ids, parked_ms)
                    for t, c in zip(line.split("\t"), columns, strict=True)
                ]
                for line in lines
            ]
            rows[(schema, table)] = (columns, parsed)
    return Template(session_id, run_id, calls, parked_ms, rows)


# -- loading ------------------------------------------------------------------------------


def _ids(seed: str, i: int) -> tuple[str, str]:
    digest = hashlib.md5(f"{seed}:{i}".encode()).hexdigest()
    return "ses_" + digest, "run_" + hashlib.sha1(f"{seed}:{i}".encode()).hexdigest()[:24]


def _render(f: Field, swap: list[tuple[str, str]], shift_ms: int) -> str:
    kind = f.kind
    if kind == "text":
        text: str = f.value
        for old, new in swap:
            text = text.replace(old, new)
        return text
    if kind == "uuid":
        return str(uuid.uuid4())
    if kind == "pickle":
        raw: bytes = f.value
        for old, new in swap:
            raw = raw.replace(old.encode(), new.encode())
        return base64.b64encode(raw).decode()
    out = []
    for part, value in f.parts:
        if part == "text":
            for old, new in swap:
                value = value.replace(old, new)
            out.append(value)
        elif part == "ms":
            out.append(str(value + shift_ms))
        elif part == "seconds":
            out.append(repr(float(value) + shift_ms / 1000))
        else:
            out.append(str(value + timedelta(milliseconds=shift_ms)))
    return "".join(out)


def session_lines(
    template: Template,
    session_id: str,
    run_id: str,
    shift_ms: int,
    owned_by: tuple[str, str] | None = None,
) -> dict[tuple[str, str], list[str]]:
    """The COPY lines of one loaded session, by table (``owned_by``: its principal and tenant,
    in place of ``TEMPLATE_OWNER``)."""
    swap = [(template.session_id, session_id), (template.run_id, run_id)]
    swap += [
        (old, call_id(session_id, run_id, count, index))
        for old, (count, index) in template.calls.items()
    ]
    if owned_by is not None and owned_by != TEMPLATE_OWNER:
        # The principal first: it holds the tenant's name.
        for old, new in zip(TEMPLATE_OWNER, owned_by, strict=True):
            assert len(old) == len(new), f"{new!r}: an owner of another length breaks pickles"
            swap.append((old, new))
    olds = [old for old, _ in swap] + list(TEMPLATE_OWNER)
    return {
        key: [
            "\t".join(f.value if _constant(f, olds) else _render(f, swap, shift_ms) for f in row)
            for row in parsed
        ]
        for key, (_, parsed) in template.rows.items()
        if key not in TRIGGERED
    }


def _constant(f: Field, olds: list[str]) -> bool:
    """Whether ``f`` is literal text holding none of ``olds``: the same in every session
    (judged once a field; the swaps' old texts are the template's, the same every call)."""
    if f.constant is None:
        f.constant = f.kind == "text" and not any(old in f.value for old in olds)
    return f.constant


def load(
    url: str,
    template: Template,
    n: int,
    *,
    spread_seconds: float = 12 * 3600.0,
    seed: str | None = None,
    batch: int = 2000,
    report: bool = False,
    tenants: int = 0,
    principals: int = 1,
) -> list[str]:
    """Write ``n`` sessions made of ``template`` (session ``i`` parked
    ``spread_seconds * (i + 1) / n`` before it; with ``tenants``, owned by ``owner(i, ...)``,
    else by the template's owner); their session ids."""
    seed = seed or uuid.uuid4().hex
    made: list[str] = []
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        # Our triggers (the approvals inbox) fire as for a real park; DBOS's table has none.
        for first in range(0, n, batch):
            lines: dict[tuple[str, str], list[str]] = {
                k: [] for k in template.rows if k not in TRIGGERED
            }
            for i in range(first, min(n, first + batch)):
                sid, run = _ids(seed, i)
                shift = -int(spread_seconds * 1000 * (i + 1) / n)
                owned = owner(i, tenants, principals) if tenants else None
                for key, rows in session_lines(template, sid, run, shift, owned).items():
                    lines[key] += rows
                made.append(sid)
            with conn.transaction():
                for (schema, table), rows in lines.items():
                    if not rows:
                        continue
                    columns = ", ".join(f'"{c}"' for c in template.rows[(schema, table)][0])
                    with conn.cursor().copy(
                        f'COPY "{schema}"."{table}" ({columns}) FROM STDIN'
                    ) as copy:
                        copy.write("\n".join(rows) + "\n")
            if report and (first // batch) % 25 == 0:
                rate = len(made) / (time.perf_counter() - started)
                print(f"loaded {len(made)} ({rate:.0f}/s)", file=sys.stderr, flush=True)
    return made


async def park_one(
    url: str, *agents: str, executor_id: str = "bulk-template", owned: bool = False
) -> list[str]:
    """Park one session of each of ``agents`` (``hibernation.py``'s) for real; their ids
    (``owned``: as ``TEMPLATE_OWNER``). (One runtime a process: DBOS's shutdown ends the
    event loop's default executor.)"""
    from hibernation import AGENTS

    from helix_dbos.config import HelixSettings
    from helix_dbos.runtime import AgentRuntime

    settings = HelixSettings(database_url=url, executor_id=executor_id, application_version="bench")
    rt = AgentRuntime(AGENTS, settings)
    await rt.launch()
    try:
        parked = []
        for agent in agents:
            principal, tenant = TEMPLATE_OWNER if owned else (None, None)
            handle = await rt.start(agent, "go", principal=principal, tenant=tenant)
            outcome = await handle.workflow.get_result()
            assert outcome.get("outcome") == "hibernated", outcome
            parked.append(str(handle.session_id))
        return parked
    finally:
        await rt.shutdown()


def _load_share(
    url: str, session: str, n: int, spread_seconds: float, args: argparse.Namespace
) -> None:
    """One worker's share: ``n`` sessions of the template ``session``."""
    load(
        url,
        read_template(url, session),
        n,
        spread_seconds=spread_seconds,
        report=True,
        tenants=args.tenants,
        principals=args.principals,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="a migrated database")
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--agent", default="cold", help="one agent, or several: a,b,c")
    parser.add_argument("--tenants", type=int, default=0, help="owners: this many tenants")
    parser.add_argument("--principals", type=int, default=100, help="principals per tenant")
    parser.add_argument("--spread-hours", type=float, default=12.0)
    parser.add_argument("--template", help="a hibernated session to copy (default: park one)")
    parser.add_argument("--no-vacuum", action="store_true")
    parser.add_argument("--workers", type=int, default=1, help="loading processes")
    args = parser.parse_args()
    agents = args.agent.split(",")
    owned = args.tenants > 0
    parked = (
        [args.template] if args.template else asyncio.run(park_one(args.url, *agents, owned=owned))
    )
    started = time.perf_counter()
    # Each template's sessions in ``workers`` shares, each its own ids' seed.
    jobs = []
    for k, session in enumerate(parked):
        count = args.sessions // len(parked) + (k < args.sessions % len(parked))
        for w in range(args.workers):
            share = count // args.workers + (w < count % args.workers)
            jobs.append((args.url, session, share, args.spread_hours * 3600, args))
    with multiprocessing.Pool(args.workers) as pool:
        pool.starmap(_load_share, jobs)
    seconds = time.perf_counter() - started
    if not args.no_vacuum:
        with psycopg.connect(args.url, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE)")
    print(
        f"loaded {args.sessions} sessions of {args.agent} in {seconds:.1f} s "
        f"({args.sessions / seconds:.0f}/s); total {time.perf_counter() - started:.1f} s"
    )


if __name__ == "__main__":
    main()
