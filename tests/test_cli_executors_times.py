"""``helix-dbos executors`` on both backends: ages in the table, UTC offsets in ``--json``.

SQLite hands timestamps back without their zone; Postgres hands them back in the session's
time zone. The command shows both the same way: ages computed in UTC, and every ``--json``
timestamp in UTC with its offset, in one format.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from helix_dbos.cli import main
from helix_dbos.config import HelixSettings
from helix_dbos.runtime._operations.fleet import Fleet
from helix_dbos.store.store import SessionStore

#: One format on both backends: UTC, microseconds, the offset spelled out.
ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$")


def _two_executors(url: str) -> None:
    """``live-1`` heartbeating now, ``gone-1`` stopped cleanly (as a process records them)."""

    async def record() -> None:
        store = SessionStore.from_url(url)
        try:
            for executor_id in ("live-1", "gone-1"):
                fleet = Fleet(HelixSettings(database_url=url, executor_id=executor_id), store)
                await fleet.register()
            await fleet.stop()
        finally:
            await store.close()

    asyncio.run(record())


def test_executors_shows_ages_and_utc_offsets(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["migrate", "--database-url", db_url]) == 0
    if db_url.startswith("postgresql"):
        # Not UTC, so timestamps come back from Postgres with another offset.
        with psycopg.connect(db_url, autocommit=True) as conn:
            dbname = db_url.rpartition("/")[2]
            conn.execute(f"ALTER DATABASE \"{dbname}\" SET timezone TO 'Asia/Kolkata'")
    _two_executors(db_url)
    capsys.readouterr()

    assert main(["executors", "--all", "--database-url", db_url]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0].split() == [
        "EXECUTOR",
        "STATE",
        "VERSION",
        "HOST",
        "PID",
        "HEARTBEAT",
        "PARKED",
        "ADOPTED",
        "BY",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert rows["live-1"][1] == "live" and rows["gone-1"][1] == "stopped"
    for row in rows.values():
        # HEARTBEAT: "<n>s ago", a few seconds at most.
        age = row[5:7]
        assert age[1] == "ago" and re.fullmatch(r"\d+s", age[0]), row
        assert int(age[0][:-1]) < 60

    assert main(["executors", "--all", "--json", "--database-url", db_url]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    found = {e["executorId"]: e for e in json.loads(out)["executors"]}
    assert set(found) == {"live-1", "gone-1"}
    now = datetime.now(UTC)
    stamps = [found["live-1"][k] for k in ("startedAt", "heartbeatAt")]
    stamps += [found["gone-1"][k] for k in ("startedAt", "heartbeatAt", "stoppedAt")]
    for stamp in stamps:
        assert ISO_UTC.match(stamp), stamp
        assert abs(datetime.fromisoformat(stamp) - now) < timedelta(minutes=1), stamp
    assert found["live-1"]["stoppedAt"] is None and found["gone-1"]["adoptedAt"] is None
