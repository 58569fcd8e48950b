"""``helix-dbos approvals approve|deny ID`` and ``--decided`` (Postgres and SQLite).

The sessions are parked as a park writes them, through the store (no turn runs: the answer is
stored on the call, as it would be for a hibernated turn); the commands run in-process, as
``main`` with arguments. The operator answers through the submit path: the approval's policy
holds (four eyes, its quorum) and the record names the operator with its credential.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from helix_dbos.cli import EXIT_OK, EXIT_USAGE, main
from helix_dbos.core.session import PendingCall, SessionState
from helix_dbos.store.migrate import upgrade
from helix_dbos.store.store import SessionStore

HOUR_MS = 3_600_000
POLICIES = {
    "s0": {"fourEyes": True, "quorum": 2},
    "s1": None,
}


async def _park(url: str, now: int) -> None:
    store = SessionStore.from_url(url)
    try:
        for i, (sid, policy) in enumerate(POLICIES.items()):
            call = PendingCall(
                tool_call_id=f"c{i}",
                tool_name="pay",
                input={"n": i},
                run_id="r",
                kind="approval",
                index=0,
                deadline_at=now + HOUR_MS,
                registered_at=now - 60_000,
                completed_retention_ms=0,
                approval_id=f"r::c{i}",
                args_digest="d",
                policy=policy,
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
                    principal="ada",
                    tenant="acme",
                )
            )
    finally:
        await store.close()


async def _entry(url: str, sid: str) -> PendingCall:
    store = SessionStore.from_url(url)
    try:
        state = await store.get(sid)
    finally:
        await store.close()
    return next(iter(state.pending.values()))


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["approvals", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_operator_answers_and_the_record_names_it(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade(db_url)
    asyncio.run(_park(db_url, int(time.time() * 1000)))
    db = ("--database-url", db_url)

    # Four eyes hold for the operator too: not as the session's own principal.
    code, _, err = run(capsys, *db, "approve", "r::c0", "--as", "ada")
    assert code == EXIT_USAGE and "four eyes" in err, err
    code, out, err = run(capsys, *db, "approve", "r::c0", "--as", "ops-ann")
    assert code == EXIT_OK and "counted; its quorum waits" in out, err
    code, out, err = run(capsys, *db, "approve", "r::c0", "--as", "ops-ann")  # once only
    assert code == EXIT_OK, err
    code, out, _ = run(capsys, *db)  # the inbox says the quorum's progress
    inbox = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert inbox["r::c0"].endswith("1 of 2") and inbox["r::c1"].endswith("-")
    assert asyncio.run(_entry(db_url, "s0")).submitted_at is None
    code, out, err = run(capsys, *db, "approve", "r::c0", "--as", "ops-bo", "--reason", "ok")
    assert code == EXIT_OK and "approved r::c0 in s0 as ops-bo" in out, err
    decided = asyncio.run(_entry(db_url, "s0"))
    assert decided.response is not None and decided.response["approvers"] == ["ops-ann", "ops-bo"]

    code, out, err = run(capsys, *db, "deny", "r::c1", "--reason", "not today")
    assert code == EXIT_OK and out.startswith("denied r::c1 in s1 as operator:"), err
    code, _, err = run(capsys, *db, "deny", "r::c1")
    assert code == EXIT_USAGE and "no pending approval" in err

    code, out, err = run(capsys, *db, "--decided")
    lines = out.splitlines()
    assert code == EXIT_OK and lines[0].split()[:3] == ["DECIDED", "(UTC)", "OUTCOME"], err
    assert len(lines) == 4
    code, out, err = run(capsys, *db, "--decided", "--json")
    rows: list[dict[str, Any]] = json.loads(out)["decisions"]
    assert [(r["approvalId"], r["outcome"], r["principal"], r["votes"], r["final"]) for r in rows][
        ::-1
    ] == [
        ("r::c0", "approved", "ops-ann", 1, False),
        ("r::c0", "approved", "ops-bo", 2, True),
        ("r::c1", "denied", rows[0]["principal"], None, True),
    ]
    assert {r["credential"] for r in rows} == {"operator_cli"}
    assert rows[0]["reason"] == "not today" and rows[0]["ownerPrincipal"] == "ada"
    code, out, _ = run(capsys, *db, "--decided", "--json", "--decided-by", "ops-bo")
    assert [r["principal"] for r in json.loads(out)["decisions"]] == ["ops-bo"]

    # The record's own retention: nothing is older than a day; everything is older than 0 s.
    code, out, _ = run(capsys, *db, "--purge-decided", "--older-than", "1d")
    assert code == EXIT_OK and out.startswith("deleted 0 decisions")
    code, _, err = run(capsys, *db, "--purge-decided")
    assert code == EXIT_USAGE and "HELIX_DECISION_RETENTION_DAYS" in err
    time.sleep(0.01)
    code, out, _ = run(capsys, *db, "--purge-decided", "--older-than", "0s")
    assert out.startswith("deleted 3 decisions")
