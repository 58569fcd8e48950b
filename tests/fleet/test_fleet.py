"""A fleet of real ``helix-dbos serve`` processes on one Postgres: dead executors' turns are
adopted, each turn runs once, rolling deploys strand nothing.

Every child process is killed in a ``finally``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .servers import Server, assert_each_turn_ran_once, sql, wait_completed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FAST = {"HELIX_HEARTBEAT_SECONDS": "1", "HELIX_ADOPT_AFTER_SECONDS": "4"}


def _cli(url: str, *args: str) -> dict:  # type: ignore[type-arg]
    out = subprocess.run(
        [sys.executable, "-m", "helix_dbos.cli", *args, "--json", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _park(server: Server, count: int) -> dict[str, str]:
    sids = [server.start(f"replace 'x{i}' with 'y{i}'") for i in range(count)]
    return {sid: server.parked_call(sid) for sid in sids}


def test_dead_executor_turns_complete_via_a_survivor(pg_url: str, tmp_path: Path) -> None:
    """A parks 10 turns and is SIGKILLed for good; B is alive. Submits via B answer
    new_run and all 10 complete within 30 s (default timings), each exactly once, now owned
    by B; the adoption shows in inspect and in `executors`."""
    servers: list[Server] = []
    try:
        a = Server(pg_url, tmp_path, "a")
        servers.append(a)
        a.wait_ready()
        b = Server(pg_url, tmp_path, "b")
        servers.append(b)
        b.wait_ready()
        parked = _park(a, 10)
        a.kill()
        began = time.monotonic()
        for sid, call in parked.items():
            answer = b.submit(sid, call)
            assert answer["status"] == "accepted"
            assert answer["continuation"]["kind"] == "new_run"
        wait_completed([b], list(parked), timeout=30 - (time.monotonic() - began))
        assert time.monotonic() - began < 30
    finally:
        for s in servers:
            s.close()
    assert_each_turn_ran_once(pg_url, list(parked))
    owners = sql(
        pg_url,
        "SELECT DISTINCT executor_id FROM dbos.workflow_status WHERE name = 'helix.turn'",
    )
    assert owners == [("exec-b",)]
    adopted = sql(pg_url, "SELECT workflow_id, from_executor, adopted_by FROM __agents_adoptions")
    assert len(adopted) == 10 and {(f, t) for _, f, t in adopted} == {("exec-a", "exec-b")}
    sid = next(iter(parked))
    report = _cli(pg_url, "inspect", sid)
    assert [(x["kind"], x["fromExecutor"], x["adoptedBy"]) for x in report["adoptions"]] == [
        ("adopted", "exec-a", "exec-b")
    ]
    fleet = _cli(pg_url, "executors", "--all")
    states = {e["executorId"]: (e["state"], e["adoptedBy"]) for e in fleet["executors"]}
    assert states["exec-a"] == ("adopted", "exec-b")


def test_two_survivors_adopt_one_dead_executor_once(pg_url: str, tmp_path: Path) -> None:
    """A parks 10 turns and dies; B and C both sweep for it. Exactly one claims A, and every
    turn completes exactly once (submits spread over B and C)."""
    servers: list[Server] = []
    try:
        a = Server(pg_url, tmp_path, "a", **FAST)
        servers.append(a)
        a.wait_ready()
        b = Server(pg_url, tmp_path, "b", **FAST)
        c = Server(pg_url, tmp_path, "c", **FAST)
        servers += [b, c]
        b.wait_ready()
        c.wait_ready()
        parked = _park(a, 10)
        a.kill()
        for i, (sid, call) in enumerate(parked.items()):
            answer = (b, c)[i % 2].submit(sid, call)
            assert answer["status"] == "accepted", answer
        wait_completed([b, c], list(parked), timeout=60)
    finally:
        for s in servers:
            s.close()
    assert_each_turn_ran_once(pg_url, list(parked))
    adopted = sql(pg_url, "SELECT workflow_id, adopted_by FROM __agents_adoptions")
    assert len(adopted) == 10 == len({w for w, _ in adopted}), adopted
    assert len({by for _, by in adopted}) == 1, adopted
    owners = {
        o
        for (o,) in sql(
            pg_url, "SELECT executor_id FROM dbos.workflow_status WHERE name = 'helix.turn'"
        )
    }
    assert owners <= {"exec-b", "exec-c"}


def test_rolling_deploy_completes_every_turn(pg_url: str, tmp_path: Path) -> None:
    """Release N (two processes) parks turns; release N+1 (another contract version that
    replays N's) comes up; N stops. Turns answered before and after the switch all complete
    once: N's processes run the first ones, N+1 moves the rest forward and runs them."""
    n_env = {**FAST, "HELIX_APP_VERSION": "release-n"}
    n1_env = {**FAST, "HELIX_APP_VERSION": "release-n1", "HELIX_FORWARD_VERSIONS": "release-n"}
    servers: list[Server] = []
    try:
        n_a = Server(pg_url, tmp_path, "n-a", **n_env)
        n_b = Server(pg_url, tmp_path, "n-b", **n_env)
        servers += [n_a, n_b]
        n_a.wait_ready()
        n_b.wait_ready()
        parked = {**_park(n_a, 4), **_park(n_b, 4)}
        n1 = Server(pg_url, tmp_path, "n1", **n1_env)
        servers.append(n1)
        n1.wait_ready()
        sids = list(parked)
        early, late = sids[::2], sids[1::2]
        for sid in early:  # via the new release, while the old one still runs
            assert n1.submit(sid, parked[sid])["continuation"]["kind"] == "new_run"
        wait_completed([n1], early, timeout=60)
        n_a.stop()
        n_b.stop()
        for sid in late:
            assert n1.submit(sid, parked[sid])["continuation"]["kind"] == "new_run"
        wait_completed([n1], late, timeout=60)
        fresh = n1.start()  # and the new release serves new turns
        n1.submit(fresh, n1.parked_call(fresh))
        wait_completed([n1], [fresh], timeout=60)
    finally:
        for s in servers:
            s.close()
    assert_each_turn_ran_once(pg_url, [*sids, fresh])
    versions = dict(
        sql(
            pg_url,
            "SELECT workflow_uuid, application_version FROM dbos.workflow_status "
            "WHERE name = 'helix.turn'",
        )
    )
    by_session = {sid: v for w, v in versions.items() for sid in sids if f":{sid}:" in w}
    assert {by_session[s] for s in early} == {"release-n"}
    assert {by_session[s] for s in late} == {"release-n1"}
    forwarded = sql(pg_url, "SELECT kind, from_version, to_version FROM __agents_adoptions")
    assert ("forwarded", "release-n", "release-n1") in forwarded
