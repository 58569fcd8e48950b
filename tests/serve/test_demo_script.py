"""`bash scripts/demo`: the Quick start's first command installs into .venv and serves the demo
with session tokens on, printing the URL to open. Its secret and executor id are kept in a
state file next to the database (``scripts/demo-state.bash``), so a second run accepts the
first one's tokens and recovers its turns as their own executor."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from helix_dbos.http import SessionTokens
from tests.http.conftest import _free_port

ROOT = Path(__file__).resolve().parents[2]
STATE_HELPER = ROOT / "scripts" / "demo-state.bash"

pytestmark = pytest.mark.slow


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELIX_", "DBOS_"))}
    env.update(extra)
    return env


def _run_demo(env: dict[str, str], port: int) -> tuple[subprocess.Popen[str], str]:
    """Start ``bash scripts/demo``; returns once the server answers."""
    proc = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "demo")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        assert proc.poll() is None, proc.communicate()
        try:
            httpx.get(f"{base}/openapi.json", timeout=2).raise_for_status()
            return proc, base
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the demo did not start"
            time.sleep(0.2)


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    return out, err


def _read_state(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def _executor_ids(database: Path) -> list[str]:
    with sqlite3.connect(database) as conn:
        rows = conn.execute("SELECT executor_id FROM __agents_executors").fetchall()
    return sorted(r[0] for r in rows)


def test_the_demo_script_installs_and_serves_the_demo_and_keeps_its_state(
    tmp_path: Path,
) -> None:
    """Two runs: the second accepts the first's session token, and runs as the same
    executor; the state file next to the database is private (0600)."""
    port = _free_port()
    database = tmp_path / "demo.sqlite"
    env = _clean_env(PORT=str(port), HELIX_DATABASE_URL=f"sqlite:///{database}")

    proc, base = _run_demo(env, port)
    try:
        created = httpx.post(f"{base}/chat/sessions", timeout=10).json()
        assert created["id"] and created["token"], "session tokens are on"
        refused = httpx.get(f"{base}/status", params={"sessionId": created["id"]}, timeout=10)
        assert refused.status_code == 401
        started = httpx.post(
            f"{base}/start", json={"agentType": "editor", "message": "hello"}, timeout=30
        ).json()
        session = {"sessionId": started["sessionId"]}
        bearer = {"Authorization": f"Bearer {started['token']}"}
    finally:
        out, err = _stop(proc)
    assert f"open http://127.0.0.1:{port}/" in out
    assert f"Approval inbox: http://127.0.0.1:{port}/inbox" in out
    # Two demo approvers' tokens, for the demo's tenant, in the address of the approvals page.
    (approvers,) = re.findall(rf"http://127\.0\.0\.1:{port}/inbox#approvers=(\S+)", out)
    ann, bo = approvers.split(",")
    names = [
        SessionTokens(_read_state(tmp_path / "demo.env")["HELIX_AUTH_SECRET"]).verify_approver(t)
        for t in (ann, bo)
    ]
    assert [(c.tenant, c.principal) for c in names if c] == [
        ("demo", "ann@example.com"),
        ("demo", "bo@example.com"),
    ]
    assert "PORT=8001 bash scripts/demo" in out
    assert ".venv/bin/helix-dbos" in out
    assert f"{tmp_path / 'demo.env'} (kept across restarts" in out
    assert (ROOT / ".venv" / "bin" / "helix-dbos").exists()
    assert "Uvicorn running on" in err

    state_file = tmp_path / "demo.env"
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    state = _read_state(state_file)
    assert len(state["HELIX_AUTH_SECRET"]) == 64
    assert len(state["HELIX_METRICS_TOKEN"]) == 32
    assert (
        f"Metrics: curl -H 'Authorization: Bearer {state['HELIX_METRICS_TOKEN']}' "
        f"http://127.0.0.1:{port}/metrics"
    ) in out
    assert _executor_ids(database) == [state["HELIX_EXECUTOR_ID"]]

    proc, base = _run_demo(env, port)
    try:
        # The first run's token is still good: the secret is the same.
        status = httpx.get(f"{base}/status", params=session, headers=bearer, timeout=10)
        assert status.status_code == 200, status.text
        # The metrics token of demo.env opens /metrics; without it, the 401 says what to send.
        scrape = {"Authorization": f"Bearer {state['HELIX_METRICS_TOKEN']}"}
        metrics = httpx.get(f"{base}/metrics", headers=scrape, timeout=10)
        assert metrics.status_code == 200 and "helix_" in metrics.text
        refused = httpx.get(f"{base}/metrics", timeout=10)
        assert refused.status_code == 401 and "HELIX_METRICS_TOKEN" in refused.json()["error"]
    finally:
        out, err = _stop(proc)
    # The install is editable and pyproject.toml did not change: no second install.
    assert "not installing again" in out and "Installing helix-dbos" not in out
    assert "fleet.executor_id_reused" not in err
    assert _read_state(state_file) == state
    assert _executor_ids(database) == [state["HELIX_EXECUTOR_ID"]], "one executor, twice"


def _use_state(tmp_path: Path, *serve_args: str, **env: str) -> dict[str, str]:
    """Source the demo's state helper as scripts/demo does; the variables it exports."""
    script = (
        'set -euo pipefail; source "$0"; '
        'demo_state_use "$(demo_state_file "${HELIX_DATABASE_URL}")" "$@"; '
        'echo "secret=${HELIX_AUTH_SECRET:-}"; echo "executor=${HELIX_EXECUTOR_ID:-}"; '
        'echo "metrics=${HELIX_METRICS_TOKEN:-}"'
    )
    done = subprocess.run(
        ["bash", "-c", script, str(STATE_HELPER), *serve_args],
        env=_clean_env(HELIX_DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite'}", **env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def test_the_state_is_reused_and_explicit_variables_win(tmp_path: Path) -> None:
    first = _use_state(tmp_path)
    assert len(first["secret"]) == 64 and first["executor"].startswith("demo-")
    assert _use_state(tmp_path) == first, "a second run reads the same file"
    state_file = tmp_path / "demo.env"
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    kept = state_file.read_text()

    explicit = _use_state(tmp_path, HELIX_AUTH_SECRET="s" * 40, HELIX_EXECUTOR_ID="mine")
    assert explicit == {"secret": "s" * 40, "executor": "mine", "metrics": first["metrics"]}
    assert state_file.read_text() == kept, "the file keeps its own values"

    # With several workers each generates its own executor id: none is given.
    assert _use_state(tmp_path, "--workers", "2") == {
        "secret": first["secret"],
        "executor": "",
        "metrics": first["metrics"],
    }
    assert _use_state(tmp_path, "--workers=1")["executor"] == first["executor"]


def test_a_loose_or_partial_state_file_is_completed_and_made_private(tmp_path: Path) -> None:
    state_file = tmp_path / "demo.env"
    state_file.write_text("HELIX_AUTH_SECRET=kept-secret-0123456789-0123456789\n")
    state_file.chmod(0o644)

    used = _use_state(tmp_path)

    assert used["secret"] == "kept-secret-0123456789-0123456789"
    assert used["executor"].startswith("demo-")
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    assert len(used["metrics"]) == 32
    assert _read_state(state_file) == {
        "HELIX_AUTH_SECRET": used["secret"],
        "HELIX_EXECUTOR_ID": used["executor"],
        "HELIX_METRICS_TOKEN": used["metrics"],
    }


def test_a_state_file_of_an_earlier_demo_gains_a_metrics_token(tmp_path: Path) -> None:
    """A demo.env written before the metrics token keeps its secret and executor id and gets
    a token; an explicit HELIX_METRICS_TOKEN wins over the file's."""
    state_file = tmp_path / "demo.env"
    state_file.write_text(
        "HELIX_AUTH_SECRET=kept-secret-0123456789-0123456789\nHELIX_EXECUTOR_ID=demo-kept\n"
    )
    used = _use_state(tmp_path)
    assert (used["secret"], used["executor"]) == (
        "kept-secret-0123456789-0123456789",
        "demo-kept",
    )
    assert _read_state(state_file)["HELIX_METRICS_TOKEN"] == used["metrics"]
    assert _use_state(tmp_path, HELIX_METRICS_TOKEN="x" * 20)["metrics"] == "x" * 20
