"""The AG-UI endpoint driven by the real ``@ag-ui/client`` (``HttpAgent``), from Node.

Each test runs ``tests/agui_js/agui_client.mjs`` (its npm packages installed by ``bash .ci/run``
from the package lock) against ``helix-dbos serve tests.agui.agents:agents`` with session
tokens on: a browser's thread id and token come from ``POST /chat/sessions``. A missing Node
or missing packages fail the tests; they are never skipped.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serve.serving import Served
from tests.support.agui_server import ROOT, new_thread, start

HARNESS = ROOT / "tests" / "agui_js"


def node() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.fail("Node.js is not installed: the AG-UI client tests need `node` (20 or later)")
    if not (HARNESS / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("The AG-UI client is not installed: `npm ci` in tests/agui_js (bash .ci/run)")
    return path


def client(scenario: str, **options: Any) -> dict[str, Any]:
    """Run one scenario of the Node harness; its ``RESULT`` line."""
    done = subprocess.run(
        [node(), str(HARNESS / "agui_client.mjs"), scenario, json.dumps(options)],
        cwd=HARNESS,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (done.returncode, done.stdout, done.stderr)
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    node()
    with start(tmp_path_factory.mktemp("agui-js")) as served:
        yield served


def test_client_tool_round_trip(server: Served) -> None:
    """The frontend tool, declared from GET /agui/assistant/tools, is called; its answer (a
    tool message in the next run) continues the turn."""
    thread = new_thread(server.url)
    seen = client("client-tool", **thread)
    assert [t["name"] for t in seen["tools"]] == ["editContent"]
    first, second = seen["first"], seen["second"]
    assert seen["threadId"] == thread["threadId"]
    assert first["outcome"] == "success" and len(first["pending"]) == 1
    [call] = first["calls"].values()
    assert call == {
        "name": "editContent",
        "args": {"edits": [{"selector": "teh", "replacement": "the"}]},
    }
    assert (second["outcome"], second["pending"]) == ("success", [])
    assert seen["text"].startswith("Done: ") and json.loads(seen["text"][6:]) == {
        "applied": 1,
        "failed": 0,
    }


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_approval_approved_or_denied_with_a_reason(server: Served, decision: str) -> None:
    """The approval is an interrupt (our approval id, the tool, its arguments, their digest);
    the resume built with buildResumeArray approves it, or denies it with a reason."""
    seen = client(
        "approval", decision=decision, reason="not before Monday", **new_thread(server.url)
    )
    first, second = seen["first"], seen["second"]
    assert first["outcome"] == "interrupt"
    [interrupt] = first["interrupts"]
    assert interrupt["id"].endswith("::" + interrupt["toolCallId"])
    assert interrupt["metadata"]["toolName"] == "publishDocument"
    assert interrupt["metadata"]["args"] == {"documentId": "doc-1"}
    assert len(interrupt["metadata"]["argsDigest"]) == 64
    assert second["outcome"] == "success"
    result = second["results"][interrupt["toolCallId"]]
    if decision == "approve":
        assert json.loads(result["content"])["published"] is True
    else:
        assert result["metadata"] == {"errorCode": "approval_denied"}
        assert "not before Monday" in result["content"]
        assert "not before Monday" in seen["text"]


def test_a_batch_of_two_client_calls_answered_one_at_a_time(server: Served) -> None:
    seen = client("batch", **new_thread(server.url))
    first, second, third = seen["first"], seen["second"], seen["third"]
    assert len(first["pending"]) == 2
    assert second["types"] == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert second["pending"] == first["pending"][1:]  # the rest is awaited
    assert third["pending"] == [] and seen["text"].count("applied") == 2


def test_reconnect_gets_the_pending_interrupt_again(server: Served) -> None:
    """A reloaded page (a new HttpAgent on the thread) gets the interrupt again, resumes it,
    and a repeated resume is RUN_ERROR already_completed."""
    thread = new_thread(server.url)
    parked = client("park", **thread)
    [interrupt] = parked["first"]["interrupts"]
    seen = client("reconnect", **thread)
    assert seen["replay"]["interrupts"] == [interrupt]
    assert [i["id"] for i in seen["pendingInterrupts"]] == [interrupt["id"]]
    resumed = client("reconnect-and-resume", decision="approve", **thread)
    assert resumed["second"]["outcome"] == "success"
    assert resumed["repeated"]["error"]["code"] == "already_completed"


def test_auth_on(server: Served) -> None:
    """Without a token the run is refused 401; with another thread's token, 403."""
    thread = new_thread(server.url)
    assert client("refused", base=server.url, threadId=thread["threadId"])["status"] == 401
    other = new_thread(server.url)
    refused = client("refused", base=server.url, threadId=thread["threadId"], token=other["token"])
    assert (refused["status"], refused["payload"]["code"]) == (403, "forbidden")


def test_server_killed_between_the_interrupt_and_the_resume(tmp_path: Path) -> None:
    """SIGKILL while the approval waits: the restarted server replays the interrupt to a
    reloaded page, and the resume runs the tool once."""
    node()
    with start(tmp_path) as first:
        thread = new_thread(first.url)
        parked = client("park", **thread)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
    [interrupt] = parked["first"]["interrupts"]
    with start(tmp_path) as second:
        thread["base"] = second.url
        seen = client("reconnect-and-resume", decision="approve", **thread)
    assert seen["replay"]["interrupts"] == [interrupt]
    assert seen["second"]["outcome"] == "success"
    result = seen["second"]["results"][interrupt["toolCallId"]]
    assert json.loads(result["content"])["published"] is True
    assert seen["repeated"]["error"]["code"] == "already_completed"
