"""A server killed between an approval's interrupt and its resume, through the Python models.

``helix-dbos serve`` runs the test agents (session tokens on, a fixed executor id, a SQLite
file); it is killed with SIGKILL while the thread waits on an approval, and started again. A
reloaded client gets the same interrupt again and its resume runs the tool once.
"""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
from ag_ui.core import ResumeEntry, RunFinishedInterruptOutcome, RunFinishedSuccessOutcome

from tests.support.agui_server import new_thread, start

from .client import AguiThread


async def test_server_killed_between_the_interrupt_and_the_resume(tmp_path: Path) -> None:
    with start(tmp_path) as first:
        made = new_thread(first.url)
        headers = {"Authorization": f"Bearer {made['token']}"}
        async with httpx.AsyncClient(base_url=first.url, timeout=30) as http:
            thread = AguiThread(http, "/agui/assistant", made["threadId"], headers)
            thread.say("publish")
            parked = await thread.run()
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
    assert isinstance(parked.outcome, RunFinishedInterruptOutcome)
    [interrupt] = parked.outcome.interrupts
    with start(tmp_path) as second:
        async with httpx.AsyncClient(base_url=second.url, timeout=30) as http:
            reloaded = AguiThread(http, "/agui/assistant", made["threadId"], headers)
            replay = await reloaded.run()
            assert isinstance(replay.outcome, RunFinishedInterruptOutcome)
            assert replay.outcome.interrupts == [interrupt]
            approve = ResumeEntry(
                interrupt_id=interrupt.id, status="resolved", payload={"approved": True}
            )
            done = await reloaded.run([approve])
            again = await reloaded.run([approve])
    assert done.outcome == RunFinishedSuccessOutcome()
    assert '"published": true' in done.text
    assert again.error.code == "already_completed"
