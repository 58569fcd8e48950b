"""`helix-dbos serve` as an operator starts it: one startup line that says what runs, access
logs without session tokens, 400 answers that say why, and a busy port refused before the
database is touched."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from helix_dbos.store.migrate import head_revision

from .serving import SECRET, run_cli, serve_env, serving

pytestmark = pytest.mark.slow


def _fields(line: str) -> dict[str, str]:
    """The ``key=value`` fields of one text log line (whole for values without spaces)."""
    return dict(part.split("=", 1) for part in line.split() if "=" in part)


def _start(client: httpx.Client) -> dict[str, Any]:
    started = client.post("/start", json={"agentType": "editor", "message": "hi"})
    assert started.status_code == 200, started.text
    body: dict[str, Any] = started.json()
    return body


def test_text_log_masks_the_token_and_starts_with_one_line_of_facts(tmp_path: Path) -> None:
    """A GET with ?token= leaves no token in the access log; `runtime.started` names the
    database, the agents, the auth mode, the revision, the executor, the versions and the
    recovered and adopted turns; a 400 says why."""
    env = serve_env(tmp_path, HELIX_AUTH_SECRET=SECRET)
    with serving([], env, tmp_path) as served, httpx.Client(base_url=served.url) as client:
        started = _start(client)
        token, sid = started["token"], started["sessionId"]
        seen = client.get("/status", params={"sessionId": sid, "token": token})
        assert seen.status_code == 200, seen.text
        # Under another name, or any name with a token's shape: masked too.
        client.get("/status", params={"sessionId": sid, "access_token": "opaque"})
        client.get("/status", params={"sessionId": sid, "x": token})
        # The name percent-encoded: the server reads ``token`` (accepted), the log masks it.
        encoded = client.get(f"/status?sessionId={sid}&%74oken={token}")
        assert encoded.status_code == 200, encoded.text
        invalid = client.post("/start", json={"agentType": "editor"})
        assert invalid.status_code == 400
    lines = served.lines
    payload = token.split(".")[0]
    assert not [line for line in lines if payload in line], served.stderr
    access = [line for line in lines if "uvicorn.access" in line and "/status?" in line]
    assert len(access) == 4, served.stderr
    assert "&token=***" in access[0] and "access_token=***" in access[1]
    assert "x=***" in access[2] and "opaque" not in served.stderr
    assert "&%74oken=***" in access[3]

    (line,) = [line for line in lines if " runtime.started " in line]
    fields = _fields(line)
    assert fields["database"] == env["HELIX_DATABASE_URL"]
    (agents,) = re.findall(r" agents=(\[[^]]*\])", line)
    assert "editor" in json.loads(agents)
    assert fields["auth"] == "session_tokens"
    assert fields["migrationRevision"] == head_revision()
    assert fields["executorId"] and fields["applicationVersion"] and fields["version"]
    assert fields["recovered"] == "0" and fields["adopted"] == "0"

    # The two reads under undocumented query names are refused (one spelling per parameter),
    # and their lines name the parameters, never the values.
    refused = [line for line in lines if " server.bad_request " in line and "path=/status" in line]
    assert len(refused) == 2 and all("cause=query" in line for line in refused)
    assert "opaque" not in "".join(refused) and token not in "".join(refused)
    (bad,) = [line for line in lines if " server.bad_request " in line and "path=/start" in line]
    assert "code=validation_error" in bad
    assert "error" in _fields(bad) and "Field required" in bad


def test_a_port_in_use_exits_2_before_the_database_is_touched(tmp_path: Path) -> None:
    """Another listener on the port: one line, exit code 2, and no runtime was launched (the
    SQLite file was never created)."""
    env = serve_env(tmp_path, HELIX_AUTH_SECRET=SECRET)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_cli(["serve", "--port", str(port)], env, tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"helix-dbos serve: port {port} is already in use on 127.0.0.1: stop what listens "
        "there, or pick another port with --port N (for the demo: PORT=N bash scripts/demo)"
    ], done.stderr
    assert not (tmp_path / "serve.sqlite").exists()
