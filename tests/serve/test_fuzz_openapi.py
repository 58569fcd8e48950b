"""The OpenAPI document agrees with the server: a schema-driven fuzzer against `helix-dbos serve`.

Schemathesis reads ``/openapi.json`` from a served process and sends requests it derives from
the document, running every phase a command-line ``st run`` runs (examples, coverage, fuzzing)
with all of its checks: no 5xx (``not_a_server_error``), every schema-valid request accepted
(``positive_data_acceptance``), schema-invalid ones refused (``negative_data_rejection``),
answers that match their documented status, media type, headers and schema, and, with tokens
on, credentials that are not ignored (``ignored_auth``). It runs twice: unauthenticated
(``--allow-unauthenticated``) and with session tokens on (a token from ``/start``).

The generated session ids are random, so most calls name no session. The checks' default
statuses already count those answers as acceptable for a schema-valid request: 404 (no such
session or pending call), 409 (a turn is running), 429 (rate limited) and, with tokens on, 403
(the token is for another session). A 400 or 422 is a rejection; a 5xx fails on its own.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from schemathesis import engine
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events

from tests.http.conftest import _free_port
from tests.http.helpers import EDIT

from .serving import SECRET, serve_env

pytestmark = pytest.mark.slow

#: Examples per operation in the fuzzing phase: enough to reach every arm of every body while
#: the module stays well under a minute and a half.
MAX_EXAMPLES = 25
#: A fixed seed: the same requests on every run (a failure reproduces).
SEED = 20250101


def fuzz_config(session_id: str, headers: dict[str, str] | None = None) -> SchemathesisConfig:
    """Every check, deterministic generation, no example database, one worker (two threads
    generating at once can fail CPython 3.11's compiler: "AST constructor recursion depth
    mismatch").

    The reads (``/status``, ``/sse``, ``/checkpoints``, the chat's stream) name ``session_id``,
    a real session parked on a client tool, so their 200 answers are checked against the
    document too; the bodies name generated sessions.
    """
    return SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "headers": headers or {},
            "operations": [
                {
                    "include-method": "GET",
                    "parameters": {"query.sessionId": session_id, "path.chat_id": session_id},
                },
                {
                    # The chat's document is deliberately stricter than the server (the server
                    # acts on the last message only, which JSON Schema cannot single out), so
                    # some bodies it calls invalid are taken: only the other direction is
                    # checked there (a schema-valid chat body is never refused).
                    "include-path": "/chat",
                    "include-method": "POST",
                    "checks": {"negative_data_rejection": {"enabled": False}},
                },
            ],
            "workers": 1,
            # A hung request fails the run in seconds rather than at the test timeout.
            "request-timeout": 10,
            "generation": {
                "max-examples": MAX_EXAMPLES,
                "deterministic": True,
                "database": "none",
                # The server refuses a NUL character anywhere in a body (PostgreSQL cannot store
                # it). The document says so on every string field it types; inside a free-form
                # JSON value (a tool's `result`, a chat message's parts) JSON Schema cannot say
                # it without a named recursive schema, so the fuzzer is told the rule instead.
                "allow-x00": False,
            },
            "phases": {
                "examples": {"enabled": True},
                # Bodies name generated ids only, not ids taken from earlier answers: on a real
                # session, some refusals depend on its state (a result that fails its tool's
                # output schema, a retry that needs a message), which no schema can say.
                "coverage": {"enabled": True, "extra-data-sources": {"responses": False}},
                "fuzzing": {"enabled": True, "extra-data-sources": {"responses": False}},
                # Stateful links are not declared; the unit phases cover every operation.
                "stateful": {"enabled": False},
            },
            "checks": {"enabled": True},
        }
    )


@contextmanager
def served(args: list[str], env: dict[str, str], tmp: Path) -> Iterator[str]:
    """``helix-dbos serve ARGS`` on a free port, its log in a file (a fuzz run logs more than a
    pipe holds); yields the URL. Stopped with SIGTERM; an internal error in the log fails."""
    port = _free_port()
    log_path = tmp / "serve.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "helix_dbos.cli", "serve", *args, "--port", str(port)],
            env=env,
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            while True:
                assert proc.poll() is None, log_path.read_text()
                try:
                    httpx.get(f"{url}/openapi.json", timeout=2).raise_for_status()
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the server did not start"
                    time.sleep(0.1)
            yield url
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = log_path.read_text()
    assert "server.internal_error" not in text and "Traceback" not in text, text[-4000:]


def start_session(url: str) -> tuple[str, str | None]:
    """A demo session parked on its client tool (``editContent``): its id, and its token when
    tokens are on."""
    body = {"agentType": "editor", "message": EDIT}
    started = httpx.post(f"{url}/start", json=body, timeout=20)
    assert started.status_code == 200, started.text
    session_id: str = started.json()["sessionId"]
    token: str | None = started.json().get("token")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + 60
    while True:
        view = httpx.get(
            f"{url}/status", params={"sessionId": session_id}, headers=headers, timeout=20
        ).json()
        if view["status"] == "suspended_client_tool":
            return session_id, token
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


@pytest.fixture(scope="module")
def open_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The unauthenticated server's document (the server runs for the module)."""
    tmp = tmp_path_factory.mktemp("fuzz-open")
    with served(["--allow-unauthenticated"], serve_env(tmp), tmp) as url:
        session_id, _ = start_session(url)
        yield schemathesis.openapi.from_url(f"{url}/openapi.json", config=fuzz_config(session_id))


@pytest.fixture(scope="module")
def token_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The document of a server with session tokens on, with a token from ``/start``."""
    tmp = tmp_path_factory.mktemp("fuzz-tokens")
    with served([], serve_env(tmp, HELIX_AUTH_SECRET=SECRET), tmp) as url:
        session_id, token = start_session(url)
        assert token is not None
        yield schemathesis.openapi.from_url(
            f"{url}/openapi.json",
            config=fuzz_config(session_id, {"Authorization": f"Bearer {token}"}),
        )


def run_fuzzer(schema: Any) -> tuple[Counter[tuple[str, int]], list[str]]:
    """Run every unit phase and every check over ``schema``: how often each operation answered
    each status, and one line per failed check (its check, operation and a curl command) or
    engine error."""
    answers: Counter[tuple[str, int]] = Counter()
    found: list[str] = []
    for event in engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            for interaction in event.recorder.interactions.values():
                if interaction.response is not None:
                    answers[event.recorder.label, interaction.response.status_code] += 1
            for checks in event.recorder.checks.values():
                for node in checks:
                    if node.failure_info is not None:
                        failure = node.failure_info.failure
                        found.append(
                            f"{node.name} on {failure.operation}: {failure.title}: "
                            f"{failure.message}\n    {node.failure_info.code_sample}"
                        )
        elif isinstance(event, events.NonFatalError | events.FatalError):
            found.append(f"engine error: {event!r}")
        elif isinstance(event, events.EngineFinished):
            found.extend(f"after the run: {failure!r}" for failure in event.failures)
    return answers, found


#: The reads of the real session: each must have answered 200 (the fuzzer got past auth and
#: its answers were checked against their schemas).
READS = ("GET /status", "GET /sse", "GET /checkpoints", "GET /chat/{chat_id}/stream")


def test_unauthenticated_server_agrees_with_its_document(open_schema: Any) -> None:
    """Unauthenticated: no 5xx, no schema-valid request refused, every answer as documented."""
    answers, failures = run_fuzzer(open_schema)
    assert not failures, f"{len(failures)} failed checks:\n" + "\n".join(failures)
    assert all(answers[read, 200] for read in READS), sorted(answers.items())
    assert sum(answers.values()) > 500, sorted(answers.items())


def test_server_with_tokens_agrees_with_its_document(token_schema: Any) -> None:
    """With session tokens on: the same, and a request without the token is refused (the
    operations that need one say so in the document's security requirements)."""
    answers, failures = run_fuzzer(token_schema)
    assert not failures, f"{len(failures)} failed checks:\n" + "\n".join(failures)
    assert all(answers[read, 200] for read in READS), sorted(answers.items())
    assert sum(answers.values()) > 500, sorted(answers.items())
