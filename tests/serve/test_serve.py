"""`helix-dbos serve` as a product: your agents (APP), HELIX_LLM for the demo, one-line startup
failures, operator logs, and a stock AI SDK chat with authentication on."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http.helpers import EDIT
from tests.llm.fake_servers import FakeServer, openai_text
from tests.support.ui_stream import read_chunks

from .serving import SECRET, run_cli, serve_env, serving

pytestmark = pytest.mark.slow

AGENTS_MODULE = """
from helix_dbos import AgentRegistry, define_agent
from helix_dbos.llm import ScriptedLLM, reply

greeter = define_agent("greeter", llm=ScriptedLLM(lambda r: reply("Hello from greeter")))
echo = define_agent("echo", llm=ScriptedLLM(lambda r: reply(r.messages[-1].content)))
both = [greeter, echo]
registry = AgentRegistry(both)
not_agents = {"greeter": greeter}
"""


def wait_completed(client: httpx.Client, sid: str, headers: dict[str, str] | None = None) -> Any:
    deadline = time.monotonic() + 60
    while True:
        view = client.get("/status", params={"sessionId": sid}, headers=headers).json()
        if view["status"] in ("completed", "failed"):
            return view
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


def last_text(client: httpx.Client, sid: str) -> str:
    frames = client.get("/sse", params={"sessionId": sid}).text
    ends = [json.loads(line[6:]) for line in frames.splitlines() if line.startswith("data: ")]
    (end,) = [e for e in ends if e["type"] == "turn_end"]
    text: str = end["data"]["text"]
    return text


@pytest.mark.parametrize("attribute", ["greeter", "both", "registry"])
def test_serve_runs_the_agents_app_names(tmp_path: Path, attribute: str) -> None:
    """APP is module:attribute, imported from the working directory: an Agent, a list of
    agents or an AgentRegistry; /chat runs the first of them."""
    (tmp_path / "myagents.py").write_text(AGENTS_MODULE)
    env = serve_env(tmp_path)
    with (
        serving([f"myagents:{attribute}", "--allow-unauthenticated"], env, tmp_path) as served,
        httpx.Client(base_url=served.url, timeout=20) as client,
    ):
        started = client.post("/start", json={"agentType": "greeter", "message": "hi"})
        assert started.status_code == 200, started.text
        sid = started.json()["sessionId"]
        assert wait_completed(client, sid)["status"] == "completed"
        assert last_text(client, sid) == "Hello from greeter"
        demo = client.post("/start", json={"agentType": "editor", "message": "hi"})
        assert demo.status_code == 404 and demo.json()["code"] == "framework_agent_not_found"
        if attribute != "greeter":
            echo = client.post("/start", json={"agentType": "echo", "message": "ping"}).json()
            wait_completed(client, echo["sessionId"])
            assert last_text(client, echo["sessionId"]) == "ping"
        chat = {
            "id": f"chat-{uuid.uuid4().hex}",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "x"}]}],
            "trigger": "submit-message",
        }
        with client.stream("POST", "/chat", json=chat) as response:
            chunks = read_chunks(response)
        deltas = [c["delta"] for c in chunks if isinstance(c, dict) and c["type"] == "text-delta"]
        assert "".join(deltas) == "Hello from greeter"


def test_helix_llm_selects_the_demo_model(tmp_path: Path) -> None:
    """HELIX_LLM=openai:<model> runs the demo on that model: a local OpenAI-compatible server
    receives the request and its answer is the turn's text."""
    with FakeServer() as fake:
        fake.enqueue(openai_text("Hello ", "from the fake model."))
        env = serve_env(
            tmp_path,
            HELIX_LLM="openai:fake-model",
            HELIX_LLM_BASE_URL=f"{fake.url}/v1",
            OPENAI_API_KEY="sk-test",
        )
        with (
            serving(["--allow-unauthenticated"], env, tmp_path) as served,
            httpx.Client(base_url=served.url, timeout=20) as client,
        ):
            sid = client.post("/start", json={"agentType": "editor", "message": "hi"}).json()[
                "sessionId"
            ]
            assert wait_completed(client, sid)["status"] == "completed"
            assert last_text(client, sid) == "Hello from the fake model."
        (request,) = fake.requests
        assert request.path == "/v1/chat/completions"
        assert request.body["model"] == "fake-model"
        assert request.body["messages"][-1] == {"role": "user", "content": "hi"}
        # The demo editor's tools, and the tools of its reviewer companion.
        assert {t["function"]["name"] for t in request.body["tools"]} == {
            "editContent",
            "publishDocument",
            "deleteDocument",
            "companion__sendMessage",
            "companion__status",
            "companion__end",
        }


@pytest.mark.parametrize(
    ("extra", "args", "expected"),
    [
        pytest.param(
            {
                "HELIX_DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/helix_missing_{uuid.uuid4().hex[:8]}"
            },
            [],
            "does not exist",
            id="missing-database",
        ),
        pytest.param(
            {"HELIX_DATABASE_URL": "mysql://root@localhost/app"},
            [],
            "Unsupported database URL scheme",
            id="wrong-url",
        ),
        pytest.param(
            {"HELIX_MAX_RESULT_BYTES": "lots"},
            [],
            "HELIX_MAX_RESULT_BYTES='lots' is not a whole number",
            id="bad-setting",
        ),
        pytest.param({"HELIX_LOG_LEVEL": "loud"}, [], "HELIX_LOG_LEVEL", id="bad-log-level"),
        pytest.param({"DBOS_LOG_LEVEL": "loud"}, [], "DBOS_LOG_LEVEL", id="bad-dbos-level"),
        pytest.param({}, ["nowhere_at_all:agents"], "No module", id="app-module"),
        pytest.param({}, ["myagents:missing"], "no attribute", id="app-attribute"),
        pytest.param({}, ["myagents:not_agents"], "expected an Agent", id="app-not-agents"),
        pytest.param({}, ["myagents"], "module:attribute", id="app-spec"),
        pytest.param({}, ["myagents:both", "--chat-agent", "nobody"], "nobody", id="chat-agent"),
    ],
)
def test_startup_failures_are_one_line_with_exit_code_2(
    tmp_path: Path, extra: dict[str, str], args: list[str], expected: str
) -> None:
    (tmp_path / "myagents.py").write_text(AGENTS_MODULE)
    env = serve_env(tmp_path, HELIX_AUTH_SECRET=SECRET, **extra)
    done = run_cli(["serve", *args, "--port", "0"], env, tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("helix-dbos serve: "), done.stderr
    assert expected in lines[0]


_TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) \S")


def test_text_logs_have_time_level_event_and_fields(tmp_path: Path) -> None:
    """Text lines: time, level, event name, key=value fields. At the default level (info)
    client_tool.suspended (debug) is not shown; an interrupt logs no ERROR."""
    env = serve_env(tmp_path, HELIX_AUTH_SECRET=SECRET, HELIX_LOG_LEVEL="Info")
    with serving([], env, tmp_path) as served, httpx.Client(base_url=served.url) as client:
        started = client.post("/start", json={"agentType": "editor", "message": EDIT}).json()
        auth = {"Authorization": f"Bearer {started['token']}"}
        wait_parked(client, started["sessionId"], auth)
        stopped = client.post("/interrupt", json={"sessionId": started["sessionId"]}, headers=auth)
        assert stopped.json()["status"] == "interrupted"
    assert served.lines and all(_TEXT_LINE.match(line) for line in served.lines), served.stderr
    summary = next(line for line in served.lines if " turn.summary " in line)
    assert f"sessionId={started['sessionId']}" in summary and "outcome=interrupted" in summary
    assert not any("client_tool.suspended" in line for line in served.lines)
    assert not any(" ERROR " in line or "Traceback" in line for line in served.lines)


def wait_parked(client: httpx.Client, sid: str, headers: dict[str, str]) -> None:
    deadline = time.monotonic() + 60
    while (
        client.get("/status", params={"sessionId": sid}, headers=headers).json()["status"]
        != "suspended_client_tool"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_json_logs_at_debug_show_the_client_tool_events(tmp_path: Path) -> None:
    """--log-format json: one JSON object per line. HELIX_LOG_LEVEL=DEBUG (any case) shows
    client_tool.suspended and client_tool.submitted with their fields; DBOS stays at its own
    level (DBOS_LOG_LEVEL, default warning); an abort is not an ERROR."""
    env = serve_env(tmp_path, HELIX_AUTH_SECRET=SECRET, HELIX_LOG_LEVEL="DEBUG")
    with (
        serving(["--log-format", "json", "--verbose-validation-errors"], env, tmp_path) as served,
        httpx.Client(base_url=served.url) as client,
    ):
        # --verbose-validation-errors: a 400 says what failed (development only).
        invalid = client.post("/start", json={"agentType": "editor"})
        assert invalid.status_code == 400 and invalid.json()["details"][0]["loc"] == ["message"]
        first = client.post("/start", json={"agentType": "editor", "message": EDIT}).json()
        auth = {"Authorization": f"Bearer {first['token']}"}
        wait_parked(client, first["sessionId"], auth)
        (call,) = client.get(
            "/status", params={"sessionId": first["sessionId"]}, headers=auth
        ).json()["pendingToolCalls"]
        done = client.post(
            "/submit-tool-result",
            json={
                "sessionId": first["sessionId"],
                "toolCallId": call["toolCallId"],
                "result": {"applied": 1, "failed": 0},
            },
            headers=auth,
        )
        assert done.status_code == 200, done.text
        second = client.post("/start", json={"agentType": "editor", "message": EDIT}).json()
        auth2 = {"Authorization": f"Bearer {second['token']}"}
        wait_parked(client, second["sessionId"], auth2)
        aborted = client.post(
            "/abort", json={"sessionId": second["sessionId"], "reason": "bye"}, headers=auth2
        )
        assert aborted.json()["status"] == "failed"
    records = [json.loads(line) for line in served.lines]
    assert all({"time", "level"} <= r.keys() for r in records)
    by_event = {(r.get("event"), r.get("sessionId")): r for r in records}
    suspended = by_event[("client_tool.suspended", first["sessionId"])]
    assert suspended["level"] == "DEBUG" and suspended["toolCallId"] == call["toolCallId"]
    assert suspended["toolName"] == "editContent" and "deadlineAt" in suspended
    submitted = by_event[("client_tool.submitted", first["sessionId"])]
    assert submitted["toolCallId"] == call["toolCallId"]
    assert by_event[("turn.summary", second["sessionId"])]["outcome"] == "failed"
    assert not [r for r in records if r["level"] in ("ERROR", "CRITICAL")], records
    assert not [r for r in records if r.get("logger") == "dbos" and r["level"] == "DEBUG"]
    assert not any("Traceback" in json.dumps(r) for r in records)


def test_a_stock_ai_sdk_chat_works_with_authentication_on(tmp_path: Path) -> None:
    """What DefaultChatTransport sends, against `helix-dbos serve` with HELIX_AUTH_SECRET:
    POST /chat/sessions for an id and a token, then /chat with `Authorization: Bearer`; the
    client tool's answer comes back in the next /chat; the reconnect GET takes the token too."""
    env = serve_env(tmp_path, HELIX_AUTH_SECRET=SECRET)
    with serving([], env, tmp_path) as served, httpx.Client(base_url=served.url) as client:
        created = client.post("/chat/sessions")
        assert created.status_code == 200, created.text
        chat_id, token = created.json()["id"], created.json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        user = {
            "id": "u1",
            "role": "user",
            "parts": [{"type": "text", "text": 'replace "teh" with "the"'}],
        }
        body = {"id": chat_id, "messages": [user], "trigger": "submit-message"}
        refused = client.post("/chat", json=body)
        assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"
        other = client.post("/chat/sessions").json()
        wrong = client.post(
            "/chat", json=body, headers={"Authorization": f"Bearer {other['token']}"}
        )
        assert wrong.status_code == 403
        with client.stream("POST", "/chat", json=body, headers=auth) as response:
            assert response.status_code == 200
            chunks = [c for c in read_chunks(response) if isinstance(c, dict)]
        (call,) = [c for c in chunks if c["type"] == "tool-input-available"]
        assert call["toolName"] == "editContent" and chunks[-1]["finishReason"] == "tool-calls"
        message_id = chunks[0]["messageId"]
        reconnect = client.get(f"/chat/{chat_id}/stream", params={"token": token})
        assert reconnect.status_code == 200 and "tool-input-available" in reconnect.text
        assistant = {
            "id": message_id,
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {
                    "type": "tool-editContent",
                    "toolCallId": call["toolCallId"],
                    "state": "output-available",
                    "input": call["input"],
                    "output": {"applied": 1, "failed": 0},
                },
            ],
        }
        follow = {
            "id": chat_id,
            "messages": [user, assistant],
            "trigger": "submit-message",
            "messageId": message_id,
        }
        with client.stream("POST", "/chat", json=follow, headers=auth) as response:
            assert response.status_code == 200
            rest = [c for c in read_chunks(response) if isinstance(c, dict)]
        text = "".join(c["delta"] for c in rest if c["type"] == "text-delta")
        assert text == "Applied 1 edit." and rest[-1] == {"type": "finish", "finishReason": "stop"}
        assert client.get(f"/chat/{chat_id}/stream", headers=auth).status_code == 204
