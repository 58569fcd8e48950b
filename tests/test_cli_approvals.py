"""``helix-dbos approvals``: the inbox on the command line (Postgres and SQLite).

The sessions are parked as a park writes them, through the store (the inbox's triggers fill
its table); the command runs in-process, as ``main`` with arguments, and runs nothing else.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from helix_dbos.cli import EXIT_OK, EXIT_USAGE, main
from helix_dbos.cli_approvals import parse_duration, parse_instant
from helix_dbos.core.session import PendingCall, SessionState
from helix_dbos.store.migrate import upgrade
from helix_dbos.store.store import SessionStore

HOUR_MS = 3_600_000


async def _park(url: str, now: int) -> None:
    store = SessionStore.from_url(url)
    try:
        for i, (tenant, tool) in enumerate((("acme", "pay"), ("acme", "sign"), ("globex", "pay"))):
            sid = f"s{i}"
            call = PendingCall(
                tool_call_id=f"c{i}",
                tool_name=tool,
                input={"n": i},
                run_id="r",
                kind="approval",
                index=0,
                deadline_at=now + (i + 1) * HOUR_MS,
                registered_at=now - (3 - i) * 600_000,  # 30, 20 and 10 minutes ago
                completed_retention_ms=0,
                approval_id=f"r::c{i}",
                args_digest="d",
            )
            await store.create_session(
                SessionState(
                    session_id=sid,
                    agent_type="banker",
                    root_session_id=sid,
                    status="suspended_client_tool",
                    run_id="r",
                    pending={call.tool_call_id: call},
                    ownership={call.tool_call_id: sid},
                    principal=f"user{i}",
                    tenant=tenant,
                )
            )
    finally:
        await store.close()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["approvals", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_inbox_from_the_command_line(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    upgrade(db_url)
    now = int(time.time() * 1000)
    asyncio.run(_park(db_url, now))
    db = ("--database-url", db_url)

    code, out, _ = run(capsys, *db)
    lines = out.splitlines()
    assert code == EXIT_OK and lines[0].split()[:3] == ["APPROVAL", "TOOL", "SESSION"]
    assert [line.split()[0] for line in lines[1:]] == ["r::c0", "r::c1", "r::c2"]
    assert lines[1].split()[3:6] == ["user0", "acme", "30m"]

    def listed(*args: str) -> list[str]:
        code, out, err = run(capsys, *db, "--json", *args)
        assert code == EXIT_OK, err
        body: dict[str, Any] = json.loads(out)
        return [a["sessionId"] for a in body["approvals"]]

    assert listed("--tenant", "acme") == ["s0", "s1"]
    assert listed("--tool", "pay") == ["s0", "s2"]
    assert listed("--principal", "user1") == ["s1"]
    assert listed("--session", "s2") == ["s2"]
    assert listed("--older-than", "15m") == ["s0", "s1"]
    assert listed("--deadline-within", "90m") == ["s0"]
    assert listed("--deadline-before", str(now + 2 * HOUR_MS + 1)) == ["s0", "s1"]

    code, out, _ = run(capsys, *db, "--limit", "2")
    assert out.splitlines()[-1].startswith("more: --cursor ")
    cursor = out.splitlines()[-1].split()[-1]
    assert listed("--cursor", cursor) == ["s2"]

    for bad, message in (
        (("--limit", "0"), "limit must be between 1 and 500"),
        (("--older-than", "soon"), "not a duration"),
        (("--deadline-before", "tomorrow"), "not a time"),
        (("--deadline-before", "1", "--deadline-within", "1h"), "not both"),
        (("--cursor", "nope"), "cursor"),
    ):
        code, _, err = run(capsys, *db, *bad)
        assert code == EXIT_USAGE and message in err, (bad, err)


def test_durations_and_times() -> None:
    assert [parse_duration(t) for t in ("90", "90s", "15m", "2h", "1d", "500ms")] == [
        90.0,
        90.0,
        900.0,
        7200.0,
        86400.0,
        0.5,
    ]
    assert parse_instant("1700000000000") == 1700000000000
    assert parse_instant("2023-11-14T22:13:20") == 1700000000000
    assert parse_instant("2023-11-14T23:13:20+01:00") == 1700000000000
