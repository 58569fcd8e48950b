"""``helix-dbos serve`` of the AG-UI test agents with session tokens on, and a thread on it
as a browser gets one."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path

import httpx

from tests.serve.serving import Served, serve_env, serving

ROOT = Path(__file__).resolve().parents[2]
SECRET = "agui-js-tests-secret-0123456789abcdef-01"
#: The served app: the test agents (importable: ``serve`` runs from the checkout).
APP = "tests.agui.agents:agents"


def start(tmp_path: Path) -> AbstractContextManager[Served]:
    """``helix-dbos serve`` of the test agents, with session tokens, on ``tmp_path``'s SQLite
    file. The executor id is fixed: a restarted server recovers the turns of the one before."""
    env = serve_env(tmp_path, HELIX_AUTH_SECRET=SECRET, HELIX_EXECUTOR_ID="agui-js-tests")
    return serving([APP], env, ROOT)


def new_thread(base: str) -> dict[str, str]:
    """A thread id and its token, as a browser gets them: ``POST /chat/sessions``."""
    made = httpx.post(f"{base}/chat/sessions", timeout=20)
    assert made.status_code == 200, made.text
    body: dict[str, str] = made.json()
    return {"base": base, "threadId": body["id"], "token": body["token"]}
