"""Drive ``helix-dbos serve`` as a user's production would meet it: a real server process that
can be SIGKILLed and restarted with the same identity, and an HTTP client that rides out the
restarts; plus the checks every fault suite runs on the database afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg

__all__ = [
    "ACTIVE",
    "DRIVER_WORDS",
    "ENDED",
    "Answer",
    "Client",
    "EditorUser",
    "Findings",
    "ServeProcess",
    "check_database",
    "editor_message",
    "free_port",
    "log_time",
]

ACTIVE = ("running", "suspended_client_tool")
#: Words of driver and SQL text that must never reach a client or a recorded error.
DRIVER_WORDS = (
    "SELECT ",
    "INSERT ",
    "UPDATE ",
    "psycopg",
    "sqlalche",
    "[SQL",
    "[parameters",
    "FATAL",
)
ENDED = ("idle", "completed", "failed", "interrupted")


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ServeProcess:
    """One ``helix-dbos serve`` process on a fixed port and identity, restartable.

    Every start uses the same ``HELIX_EXECUTOR_ID`` and ``HELIX_APP_VERSION``, so a restart
    after a SIGKILL recovers the workflows the killed process left (as DBOS requires).
    """

    def __init__(
        self,
        database_url: str,
        workdir: Path,
        *,
        executor_id: str = "fault-server",
        app_version: str = "fault-test",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.database_url = database_url
        self.workdir = workdir
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "HELIX_DATABASE_URL": database_url,
            "HELIX_EXECUTOR_ID": executor_id,
            "HELIX_APP_VERSION": app_version,
            **(env or {}),
        }
        self.env.pop("HELIX_AUTH_SECRET", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0
        self.log_path = workdir / "serve.log"

    def start(self, timeout: float = 90.0) -> None:
        """Start the server and wait until it answers."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps it open
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "helix_dbos.cli",
                "serve",
                "--port",
                str(self.port),
                "--allow-unauthenticated",
            ],
            env=self.env,
            cwd=self.workdir,
            stdout=log,
            stderr=log,
        )
        log.close()
        self.starts += 1
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited at start:\n{self.log_tail()}")
            try:
                httpx.get(f"{self.base_url}/openapi.json", timeout=2).raise_for_status()
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not start:\n{self.log_tail()}") from None
                time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the server (no shutdown of any kind) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
            self.kills += 1

    def restart(self) -> None:
        """SIGKILL, then start again with the same identity."""
        self.kill()
        self.start()

    def stop(self) -> None:
        """Stop the server (gracefully, then by force)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def wait_for_log(self, text: str, timeout: float = 60.0) -> str:
        """The first line of the server's output that holds ``text``, once it is written
        (bounded polling of the log file)."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if text in line:
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} in the server's log:\n{self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server's output (for failure messages)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def log_time(line: str) -> float:
    """When the server wrote a line of its text log (its leading UTC time), in epoch seconds."""
    return datetime.fromisoformat(line.split(" ", 1)[0]).timestamp()


@dataclass
class Answer:
    """What the client submitted for one call, and what the server said to it."""

    session_id: str
    tool_call_id: str
    kind: str  # "client" or "approval"
    payload: Any  # the result, or the approval decision
    answers: list[str] = field(default_factory=list)  # status or code of each attempt


class Client:
    """An async HTTP client that retries while the server is down (a restart in progress).

    Requests that could not be sent, or whose answer was lost with the process, are sent
    again: every route is safe to repeat (a repeated submit answers ``already_completed``).
    A 503 ``store_unavailable`` is waited out the same way, as its ``Retry-After`` says.
    """

    def __init__(self, base_url: str, *, patience: float = 120.0) -> None:
        self.http = httpx.AsyncClient(base_url=base_url, timeout=30)
        self.patience = patience
        self.transport_retries = 0
        self.unavailable = 0  # 503 store_unavailable answers seen
        self.internal_errors: list[dict[str, Any]] = []  # 500 bodies seen

    async def close(self) -> None:
        await self.http.aclose()

    async def request(
        self, method: str, path: str, *, json_body: Any = None, params: Any = None
    ) -> httpx.Response:
        """Send until an answer arrives (transport errors and 503s are retried)."""
        deadline = time.monotonic() + self.patience
        delay = 0.05
        while True:
            try:
                response = await self.http.request(method, path, json=json_body, params=params)
            except httpx.TransportError:
                self.transport_retries += 1
                response = None
            if response is not None:
                if response.status_code == 503 and _code(response) == "store_unavailable":
                    self.unavailable += 1
                    assert response.headers.get("Retry-After"), "503 without Retry-After"
                elif response.status_code >= 500:
                    self.internal_errors.append({"path": path, "body": _body(response)})
                    return response
                else:
                    return response
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method} {path}: no answer within {self.patience} s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def status(self, session_id: str) -> dict[str, Any]:
        response = await self.request("GET", "/status", params={"sessionId": session_id})
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    async def submit(self, answer: Answer, body: dict[str, Any]) -> httpx.Response:
        response = await self.request("POST", "/submit-tool-result", json_body=body)
        answer.answers.append(_code(response) or str(response.status_code))
        return response


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:500]


def _code(response: httpx.Response) -> str | None:
    body = _body(response)
    if isinstance(body, dict):
        value = body.get("status") if response.status_code == 200 else body.get("code")
        return str(value) if value is not None else None
    return None


def answer_body(session_id: str, pending: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """The demo client's answer to one pending call: (kind, payload, request body)."""
    call_id = pending["toolCallId"]
    if pending.get("kind") == "approval":
        body = {
            "kind": "approval-response",
            "sessionId": session_id,
            "toolCallId": call_id,
            "approvalId": pending["approvalId"],
            "approved": True,
        }
        return "approval", True, body
    edits = pending.get("input", {}).get("edits", [])
    result = {"applied": len(edits), "failed": 0, "newVersionId": f"v-{call_id[-8:]}"}
    return "client", result, {"sessionId": session_id, "toolCallId": call_id, "result": result}


@dataclass
class EditorUser:
    """One user of the ``editor`` demo: starts a turn and answers every call until it ends.

    ``before(point)`` is called just before each ``start``, ``submit`` and ``interrupt``
    request (the chaos run kills the server there); ``on_status(sid, status)`` after each
    status read. With ``interrupt_chance`` the user interrupts its turn at a random poll.
    """

    client: Client
    rng: random.Random
    stored: list[Answer]
    interrupts: dict[str, str]
    before: Callable[[str], None] = lambda _point: None
    on_status: Callable[[str, str], None] = lambda _sid, _status: None
    starts: dict[str, int] = field(default_factory=dict)
    answer_delay: Callable[[], float] = lambda: 0.0
    """Seconds the user takes to answer a call it has just seen (a slow human)."""

    async def run(
        self, sid: str, message: str, *, timeout: float, interrupt_chance: float = 0.0
    ) -> str:
        """Drive session ``sid`` until it ends or ``timeout`` passes; return ``sid``."""
        deadline = time.monotonic() + timeout
        will_interrupt = self.rng.random() < interrupt_chance
        self.before("start")
        started = await self.client.request(
            "POST",
            "/start",
            json_body={"agentType": "editor", "message": message, "sessionId": sid},
        )
        # A start whose answer was lost is sent again: 409 then means the first one got in.
        assert started.status_code in (200, 409), started.text
        self.starts[sid] = started.status_code
        return await self.drive(sid, deadline, will_interrupt=will_interrupt)

    async def drive(self, sid: str, deadline: float, *, will_interrupt: bool = False) -> str:
        """Answer session ``sid``'s calls until it ends or the monotonic ``deadline``
        passes; return ``sid``. A call the session shows as submitted is not answered again."""
        answered: set[str] = set()
        seen: dict[str, float] = {}  # call id -> when the user will answer it
        while time.monotonic() < deadline:
            response = await self.client.request("GET", "/status", params={"sessionId": sid})
            if response.status_code == 404:
                # The start was answered, yet the session is gone: a lost start.
                self.on_status(sid, "missing")
                return sid
            response.raise_for_status()
            view = response.json()
            self.on_status(sid, view["status"])
            if view["status"] in ENDED:
                return sid
            if will_interrupt and sid not in self.interrupts and self.rng.random() < 0.25:
                self.before("interrupt")
                stopped = await self.client.request(
                    "POST", "/interrupt", json_body={"sessionId": sid}
                )
                self.interrupts[sid] = (
                    stopped.json().get("status", "?") if stopped.status_code == 200 else "error"
                )
                continue
            for pending in view.get("pendingToolCalls", []):
                call_id = pending["toolCallId"]
                if call_id in answered or pending.get("submittedAt") is not None:
                    continue
                if seen.setdefault(call_id, time.monotonic() + self.answer_delay()) > (
                    time.monotonic()
                ):
                    continue
                kind, payload, body = answer_body(sid, pending)
                answer = Answer(sid, call_id, kind, payload)
                self.before("submit")
                await self.client.submit(answer, body)
                answered.add(call_id)
                if {"accepted", "already_completed"} & set(answer.answers):
                    self.stored.append(answer)
            await asyncio.sleep(self.rng.uniform(0.03, 0.08))
        self.on_status(sid, "timeout")
        return sid


def editor_message(index: int) -> str:
    """The demo message of session ``index``: every third one also asks to publish."""
    message = 'replace "teh" with "the"'
    if index % 3 == 0:
        message += f" and publish document doc-{index}"
    return message


# -- the checks on the database ------------------------------------------------------------


@dataclass
class Findings:
    """What the database says after a fault run; every list should be empty."""

    sessions: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    not_ended: list[str] = field(default_factory=list)
    duplicate_tool_results: list[tuple[str, str, int]] = field(default_factory=list)
    lost_answers: list[tuple[str, str]] = field(default_factory=list)
    active_without_workflow: list[tuple[str, str, str | None]] = field(default_factory=list)
    double_turn_end: list[tuple[str, str, int]] = field(default_factory=list)
    failure_codes: dict[str, int] = field(default_factory=dict)
    driver_text_in_errors: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Counts (and a few examples) for reports and assertion messages."""
        return {
            "sessions": self.sessions,
            "statuses": self.statuses,
            "not_ended": len(self.not_ended),
            "duplicate_tool_results": len(self.duplicate_tool_results),
            "accepted_answers_lost": len(self.lost_answers),
            "active_without_live_workflow": len(self.active_without_workflow),
            "runs_with_two_turn_ends": len(self.double_turn_end),
            "failure_codes": self.failure_codes,
            "errors_with_driver_text": len(self.driver_text_in_errors),
            "examples": {
                "not_ended": self.not_ended[:3],
                "lost": self.lost_answers[:3],
                "active_without_workflow": self.active_without_workflow[:3],
                "driver_text": [text[:200] for text in self.driver_text_in_errors[:1]],
            },
        }

    def __str__(self) -> str:
        return json.dumps(self.summary(), indent=1, default=str)


def check_database(
    database_url: str, session_ids: list[str], accepted: list[Answer] | None = None
) -> Findings:
    """Read the outcome of a fault run straight from the tables (ours and DBOS's).

    * every session ended (not ``running`` / ``suspended_client_tool``);
    * no call has two tool-result rows;
    * every answer in ``accepted`` is applied: its call has a tool-result row, and a client
      result is the one submitted (an approval's row is the tool's output, not a denial);
    * no session is active without a live (PENDING/ENQUEUED) workflow behind it;
    * no run has two ``turn_end`` events;
    * a failed session's error is a code and a fixed message, without driver text.
    """
    found = Findings(sessions=len(session_ids))
    with psycopg.connect(database_url, autocommit=True) as conn:
        for (error,) in conn.execute(
            'SELECT error FROM "__agents_states" WHERE session_id = ANY(%s) AND error IS NOT NULL',
            (session_ids,),
        ).fetchall():
            code = str(error.get("code")) if isinstance(error, dict) else "?"
            found.failure_codes[code] = found.failure_codes.get(code, 0) + 1
            text = json.dumps(error)
            if any(word in text for word in DRIVER_WORDS):
                found.driver_text_in_errors.append(text)
        rows = conn.execute(
            "SELECT s.session_id, s.status, s.workflow_id, w.status "
            'FROM "__agents_states" s LEFT JOIN dbos.workflow_status w '
            "ON w.workflow_uuid = s.workflow_id WHERE s.session_id = ANY(%s)",
            (session_ids,),
        ).fetchall()
        for sid, status, _workflow_id, workflow_status in rows:
            found.statuses[status] = found.statuses.get(status, 0) + 1
            if status in ACTIVE:
                found.not_ended.append(sid)
                if workflow_status not in ("PENDING", "ENQUEUED"):
                    found.active_without_workflow.append((sid, status, workflow_status))
        missing = set(session_ids) - {r[0] for r in rows}
        found.not_ended.extend(sorted(missing))
        found.duplicate_tool_results = [
            (r[0], r[1], r[2])
            for r in conn.execute(
                'SELECT session_id, tool_call_id, count(*) FROM "__agents_messages" '
                "WHERE role = 'tool' AND session_id = ANY(%s) "
                "GROUP BY 1, 2 HAVING count(*) > 1",
                (session_ids,),
            ).fetchall()
        ]
        found.double_turn_end = [
            (r[0], r[1], r[2])
            for r in conn.execute(
                'SELECT session_id, run_id, count(*) FROM "__agents_events" '
                "WHERE type = 'turn_end' AND session_id = ANY(%s) "
                "GROUP BY 1, 2 HAVING count(*) > 1",
                (session_ids,),
            ).fetchall()
        ]
        results: dict[tuple[str, str], dict[str, Any]] = {
            (r[0], r[1]): r[2]
            for r in conn.execute(
                'SELECT session_id, tool_call_id, content FROM "__agents_messages" '
                "WHERE role = 'tool' AND session_id = ANY(%s)",
                (session_ids,),
            ).fetchall()
        }
    for answer in accepted or []:
        row = results.get((answer.session_id, answer.tool_call_id))
        if (
            row is None
            or answer.kind == "client"
            and row.get("result") != answer.payload
            or answer.kind == "approval"
            and row.get("error_code") == "approval_denied"
        ):
            found.lost_answers.append((answer.session_id, answer.tool_call_id))
    return found
