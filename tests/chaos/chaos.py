"""The chaos run: demo sessions through ``helix-dbos serve`` while the server is SIGKILLed at
random points (mid model step, mid start, mid submit, mid interrupt) and restarted with the
same identity.

Each session is a client of the ``editor`` demo: it starts a turn, answers every call the
session waits on (the ``editContent`` result; a third of the sessions also ask to publish, so
a human approves ``publishDocument``), and a fifth of them interrupt their turn at a random
moment. The client rides out the restarts: a request whose answer was lost is sent again.

Afterwards the database must show: every session ended, no call with two tool results, every
answer the server took (``accepted``) applied, no session active without a live workflow, no
run with two ``turn_end`` events, and no answer a 500.

``run_chaos`` is shared by the CI test (``tests/chaos/test_chaos.py``, small) and the full run
(``bench/chaos.py``: 200 sessions, 40 kills).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from helix_dbos.runtime import names
from tests.faults.serve import (
    ENDED,
    Answer,
    Client,
    EditorUser,
    Findings,
    ServeProcess,
    check_database,
    editor_message,
)

__all__ = ["KILL_POINTS", "ChaosReport", "run_chaos"]

#: Where a kill lands: during a model call, or a few ms into one of these requests.
KILL_POINTS = ("model", "start", "submit", "interrupt")


@dataclass
class ChaosReport:
    """What a chaos run did and what the database showed afterwards."""

    sessions: int
    kills_by_point: dict[str, int]
    seconds: float
    findings: Findings
    interrupted_then_completed: list[str] = field(default_factory=list)
    internal_errors: list[dict[str, Any]] = field(default_factory=list)
    transport_retries: int = 0
    hibernations: dict[str, Any] = field(default_factory=dict)
    late: list[str] = field(default_factory=list)
    """Sessions that ended only in the grace after their timeout (slow, not stuck)."""
    still_waiting: dict[str, Any] = field(default_factory=dict)
    """Sessions that did not end even then: each one's last status view."""

    @property
    def ok(self) -> bool:
        f = self.findings
        return not (
            f.not_ended
            or f.duplicate_tool_results
            or f.lost_answers
            or f.active_without_workflow
            or f.double_turn_end
            or self.interrupted_then_completed
            or self.internal_errors
        )

    def summary(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "kills": self.kills_by_point,
            "seconds": round(self.seconds, 1),
            **self.findings.summary(),
            "interrupt_answered_interrupted_but_completed": len(self.interrupted_then_completed),
            "http_500_answers": len(self.internal_errors),
            "client_resends_after_lost_answers": self.transport_retries,
            **self.hibernations,
            "late": len(self.late),
            "late_examples": self.late[:3],
            "still_waiting": list(self.still_waiting.values())[:2],
        }


class _Killer:
    """Kills the server at chosen points, one at a time, and restarts it."""

    def __init__(self, server: ServeProcess, rng: random.Random) -> None:
        self.server = server
        self.rng = rng
        self.armed: str | None = None
        self.fired = asyncio.Event()
        self.lock = asyncio.Lock()
        self.by_point: dict[str, int] = {point: 0 for point in KILL_POINTS}
        self.running_sessions: set[str] = set()

    def saw(self, sid: str, status: str) -> None:
        """A client read ``status``: track which sessions run (a model call, likely)."""
        if status == "running":
            self.running_sessions.add(sid)
        else:
            self.running_sessions.discard(sid)

    def before(self, point: str) -> None:
        """Called by a client just before it sends a ``point`` request."""
        if self.armed == point:
            self.armed = None
            asyncio.get_running_loop().create_task(self._kill_soon(point))

    async def _kill_soon(self, point: str) -> None:
        # A few ms into the request: the handler is mid-way (entry committed, workflow not
        # started; answer stored, wake-up not sent; ...) as often as not.
        await asyncio.sleep(self.rng.uniform(0.0, 0.03))
        self._kill(point)

    def _kill(self, point: str) -> None:
        self.server.kill()
        self.by_point[point] += 1
        self.fired.set()

    async def kill_at(self, point: str, wait: float = 5.0) -> None:
        """Kill at ``point`` (or at once, as ``model``, if no such request comes), restart."""
        async with self.lock:
            self.fired.clear()
            if point == "model":
                deadline = time.monotonic() + wait
                while not self.running_sessions and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                self._kill("model")
            else:
                self.armed = point
                try:
                    await asyncio.wait_for(self.fired.wait(), wait)
                except TimeoutError:
                    self.armed = None
                    self._kill("model")
            await asyncio.to_thread(self.server.start)


async def run_chaos(
    database_url: str,
    workdir: Path,
    *,
    sessions: int = 30,
    kills: int = 5,
    concurrency: int = 15,
    model_delay_ms: int = 150,
    interrupt_share: float = 0.2,
    session_timeout: float = 90.0,
    late_grace: float = 120.0,
    seed: int | None = None,
    hot_window: float | None = None,
    slow_answer_share: float = 0.0,
) -> ChaosReport:
    """Run the chaos scenario against a fresh database and return the report.

    ``hot_window``: the server's ``HELIX_HIBERNATE_AFTER_SECONDS``; with ``slow_answer_share``
    of the calls answered only after one to two and a half hot windows, kills also land on
    hibernations and continuations. A session that has not ended within ``session_timeout``
    is driven again for ``late_grace`` seconds once the kills are over: the report counts it
    ``late`` if it ends then, and it stays a failure (``not_ended``) if it does not.
    """
    rng = random.Random(seed)
    tag = f"{rng.getrandbits(32):08x}"
    env = {"HELIX_DEMO_MODEL_DELAY_MS": str(model_delay_ms)}
    if hot_window is not None:
        env["HELIX_HIBERNATE_AFTER_SECONDS"] = str(hot_window)
    server = ServeProcess(database_url, workdir, env=env)
    window = hot_window or 0.0

    def answer_delay() -> float:
        if rng.random() < slow_answer_share:
            return rng.uniform(window, 2.5 * window)
        return 0.0

    await asyncio.to_thread(server.start)
    client = Client(server.base_url, patience=session_timeout + 60)
    killer = _Killer(server, rng)
    stored: list[Answer] = []
    interrupted_answers: dict[str, str] = {}
    began = time.monotonic()
    gate = asyncio.Semaphore(concurrency)
    user = EditorUser(
        client,
        rng,
        stored,
        interrupted_answers,
        before=killer.before,
        on_status=killer.saw,
        answer_delay=answer_delay,
    )

    async def one(index: int) -> str:
        async with gate:
            return await user.run(
                f"chaos-{tag}-{index:04d}",
                editor_message(index),
                timeout=session_timeout,
                interrupt_chance=interrupt_share,
            )

    async def chaos_monkey(done: asyncio.Event) -> None:
        points = [KILL_POINTS[i % len(KILL_POINTS)] for i in range(kills)]
        rng.shuffle(points)
        # Starts happen early (each session starts once): their kills go first.
        points.sort(key=lambda point: point != "start")
        # Kill soon after each restart, while sessions are in flight (a restart takes
        # seconds, and the clients wait for it, so the run outlasts the kills).
        for point in points:
            if done.is_set():
                break
            await asyncio.sleep(rng.uniform(0.2, 1.0))
            await killer.kill_at(point)

    more: list[str] = []

    async def until_every_kill(monkey: asyncio.Task[None]) -> None:
        # The sessions may all end before the last kill (a restart takes seconds; a fast
        # runtime does not): keep one more session in flight until every kill has fired.
        index = sessions
        while not monkey.done():
            more.append(await one(index))
            index += 1

    try:
        all_done = asyncio.Event()
        monkey = asyncio.create_task(chaos_monkey(all_done))
        filler = asyncio.create_task(until_every_kill(monkey))
        session_ids = list(await asyncio.gather(*(one(i) for i in range(sessions))))
        await filler
        all_done.set()
        await monkey
        session_ids += more
        seconds = time.monotonic() - began
        late, waiting = await _late_or_stuck(user, client, session_ids, late_grace)
    finally:
        await client.close()
        await asyncio.to_thread(server.stop)
    interrupted = [sid for sid, said in interrupted_answers.items() if said == "interrupted"]
    stored_not_interrupted = [a for a in stored if a.session_id not in interrupted_answers]
    findings = check_database(database_url, list(session_ids), stored_not_interrupted)
    completed = _final_statuses(database_url, interrupted)
    return ChaosReport(
        sessions=len(session_ids),
        kills_by_point=killer.by_point,
        seconds=seconds,
        findings=findings,
        interrupted_then_completed=[
            sid for sid in interrupted if completed.get(sid) == "completed"
        ],
        internal_errors=client.internal_errors,
        transport_retries=client.transport_retries,
        hibernations=_hibernations(database_url),
        late=late,
        still_waiting=waiting,
    )


async def _late_or_stuck(
    user: EditorUser, client: Client, session_ids: list[str], grace: float
) -> tuple[list[str], dict[str, Any]]:
    """Tell a late session from a stuck one: every session that did not end within its
    timeout is driven again, kills over, for ``grace`` seconds. Those that end were late;
    for those that still do not, what their status shows (what each waits on)."""
    views = await asyncio.gather(*(_status(client, sid) for sid in session_ids))
    behind = [view["sessionId"] for view in views if view.get("status") not in ENDED]
    if not behind:
        return [], {}
    deadline = time.monotonic() + grace
    await asyncio.gather(*(user.drive(sid, deadline) for sid in behind))
    after = await asyncio.gather(*(_status(client, sid) for sid in behind))
    waiting = {view["sessionId"]: view for view in after if view.get("status") not in ENDED}
    return [sid for sid in behind if sid not in waiting], waiting


async def _status(client: Client, sid: str) -> dict[str, Any]:
    response = await client.request("GET", "/status", params={"sessionId": sid})
    if response.status_code != 200:
        return {"sessionId": sid, "status": f"http {response.status_code}"}
    view: dict[str, Any] = response.json()
    view.setdefault("sessionId", sid)
    return view


def _hibernations(database_url: str) -> dict[str, Any]:
    """How many batches hibernated, how many continuation workflows ran, and the final status
    of each session with a hibernated batch that no continuation took (an interrupt or an
    abort of a hibernated turn starts none)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        hibernated = conn.execute(
            "SELECT c.session_id, c.run_id, s.status FROM __agents_checkpoints c "
            "JOIN __agents_states s USING (session_id) "
            "WHERE c.checkpoint_id LIKE '%%:hibernate' "
            "AND (c.state -> 'result' ->> 'hibernated')::boolean"
        ).fetchall()
        continuations = [
            str(row[0])
            for row in conn.execute(
                "SELECT workflow_uuid FROM dbos.workflow_status WHERE name = 'helix.turn.continue'"
            ).fetchall()
        ]
    uncontinued = {
        sid: status
        for sid, run, status in hibernated
        if not any(w.startswith(names.continuation_workflow_id(sid, run)) for w in continuations)
    }
    return {
        "hibernated": len(hibernated),
        "continuations": len(continuations),
        "hibernated_not_continued": uncontinued,
    }


def _final_statuses(database_url: str, session_ids: list[str]) -> dict[str, str]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            'SELECT session_id, status FROM "__agents_states" WHERE session_id = ANY(%s)',
            (session_ids,),
        ).fetchall()
    return {r[0]: r[1] for r in rows}
