"""The Python programs of docs/embedding.md, docs/server-tools.md and docs/mcp.md run as
written.

Each is copied verbatim from its page and run as the page says: the embedding apps under
``python -m uvicorn app:app`` with a real round trip over HTTP (and their helix-dbos event
lines in the server's output), the server-tool program with ``python`` (its output is the one
the page shows).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from .doc_snippets import (
    ROOT,
    assert_logged_turn,
    block_under,
    program_env,
    python_blocks,
    served,
    token_round_trip,
    wait_completed,
)

EMBEDDING = ROOT / "docs" / "embedding.md"
SERVER_TOOLS = ROOT / "docs" / "server-tools.md"
APPROVALS = ROOT / "docs" / "interrupts-and-approvals.md"
MCP = ROOT / "docs" / "mcp.md"


def test_every_embedding_program_is_run_here() -> None:
    """A Python block added to embedding.md needs its test below."""
    assert [title for title, _ in python_blocks(EMBEDDING)] == [
        "In an existing FastAPI app",
        "Your own authentication",
        "The lifespan",
        "Metrics",
    ]


def test_embedding_app_serves_turns_and_logs_them(tmp_path: Path) -> None:
    code = block_under(EMBEDDING, "In an existing FastAPI app")
    with served(code, tmp_path) as app:
        sid = token_round_trip(app.client)
        assert app.client.get("/health").json() == {"status": "ok"}
        unknown = app.client.get("/nowhere")  # install_error_handlers: typed
        assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"
    assert_logged_turn(app.output(), sid)


def test_embedding_app_with_its_own_lifespan(tmp_path: Path) -> None:
    with served(block_under(EMBEDDING, "The lifespan"), tmp_path) as app:
        sid = token_round_trip(app.client)
    assert_logged_turn(app.output(), sid)


def test_embedding_app_with_its_own_authentication(tmp_path: Path) -> None:
    """Alice's conversation is hers: she starts and reads it, Bob gets 403, no key 401."""
    alice, bob = {"X-Api-Key": "key-alice"}, {"X-Api-Key": "key-bob"}
    with served(block_under(EMBEDDING, "Your own authentication"), tmp_path) as app:
        client = app.client
        assert client.post("/conversations").status_code == 401
        sid = client.post("/conversations", headers=alice).json()["sessionId"]
        body = {"agentType": "greeter", "message": "hi", "sessionId": sid}
        assert client.post("/agents/start", json=body, headers=bob).status_code == 403
        started = client.post("/agents/start", json=body, headers=alice)
        assert started.status_code == 200, started.text
        wait_completed(client, sid, headers=alice)
        query = {"sessionId": sid}
        assert client.get("/agents/status", params=query, headers=bob).status_code == 403
        assert client.get("/agents/status", params=query).status_code == 401
        fresh = {"agentType": "greeter", "message": "hi"}  # no session of hers: refused
        assert client.post("/agents/start", json=fresh, headers=alice).status_code == 403
    assert_logged_turn(app.output(), sid)


def test_server_tool_program_prints_what_the_page_shows(tmp_path: Path) -> None:
    (code,) = [code for _, code in python_blocks(SERVER_TOOLS)]
    shown = re.search(r"It prints:\n\n```\n(.*?)```", SERVER_TOOLS.read_text(), re.S)
    assert shown is not None
    (tmp_path / "server_tools.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "server_tools.py"],
        cwd=tmp_path,
        env=program_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown.group(1)


def test_approval_gate_example_defines_a_runnable_tool() -> None:
    """The approval-gate block of interrupts-and-approvals.md defines all it uses."""
    (code,) = [code for _, code in python_blocks(APPROVALS) if "require_approval=True" in code]
    scope: dict[str, Any] = {"__name__": "approval_example"}
    exec(compile(code, str(APPROVALS), "exec"), scope)
    transfer = scope["transfer"]
    assert transfer.require_approval and transfer.execution == "server"
    ran = asyncio.run(transfer.function(scope["TransferIn"](amount=40, to="alice")))
    assert ran == {"sent": 40, "to": "alice"}


def test_every_mcp_program_is_run_here() -> None:
    """A Python block added to mcp.md needs its test below."""
    assert [title for title, _ in python_blocks(MCP)] == [
        "The server: `notes_server.py`",
        "The agent: `notes_agent.py`",
        "Agents served over MCP",
        "Agents served over MCP",
    ]


def _shown_after(page: Path, words: str) -> str:
    """The text block right after ``words`` on ``page``."""
    shown = re.search(re.escape(words) + r"\n\n```\n(.*?)```", page.read_text(), re.S)
    assert shown is not None, words
    return shown.group(1)


def test_mcp_toolset_program_prints_what_the_page_shows(tmp_path: Path) -> None:
    """The agent runs the SDK's server over stdio: the calls, the approval denied then
    given, the namespaced tools the model saw, exactly as the page shows them."""
    server, agent = [code for _, code in python_blocks(MCP)][:2]
    (tmp_path / "notes_server.py").write_text(server)
    (tmp_path / "notes_agent.py").write_text(agent)
    done = subprocess.run(
        [sys.executable, "notes_agent.py"],
        cwd=tmp_path,
        env=program_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == _shown_after(MCP, "next to `notes_server.py`. It prints:")


def test_mcp_served_app_answers_the_sdks_client(tmp_path: Path) -> None:
    """The app served by uvicorn answers the client program over /mcp: the agents listed,
    the approval asked through an elicitation and the retry answered, as the page shows."""
    app, client = [code for _, code in python_blocks(MCP)][2:]
    (tmp_path / "pay.py").write_text(client)
    with served(app, tmp_path, HELIX_AUTH_SECRET="") as server:
        url = str(server.client.base_url).rstrip("/") + "/mcp"
        done = subprocess.run(
            [sys.executable, "pay.py", url],
            cwd=tmp_path,
            env=program_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == _shown_after(MCP, "/mcp`\nprints:")
