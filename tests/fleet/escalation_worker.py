"""A runtime process of the escalation fleet test: one of two, on one Postgres database.

``python -m tests.fleet.escalation_worker URL NAME LOG [SESSIONS]``: launch a runtime (executor
``escalation-NAME``) serving the ``treasurer``, whose ``escalating`` tool escalates 1.5 s after
a call parks; register an ``on_escalated`` hook that appends one JSON line per delivery
(``{"pid", "name", "key", "approvalId"}``) to LOG; poll the outbox every 20 ms. With
SESSIONS, start that many turns that park on the escalating approval and print their approval
ids (one JSON line); then print ``ready`` and wait to be terminated.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from helix_dbos.config import HelixSettings
from helix_dbos.runtime import AgentRuntime, Notification
from tests.support.bank import Bank
from tests.support.treasury import treasurer


async def main(url: str, name: str, log: str, sessions: int) -> None:
    runtime = AgentRuntime(
        [treasurer(Bank())],
        HelixSettings(database_url=url, executor_id=f"escalation-{name}", heal_interval_seconds=0),
    )

    def told(note: Notification) -> None:
        line = {"pid": os.getpid(), "name": name, "key": note.key, "approvalId": note.approval_id}
        # One write of one line with O_APPEND: the two processes' lines never interleave.
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)

    runtime.on_escalated(told)
    runtime.configure_notifications(poll_seconds=0.02)
    await runtime.launch()
    if sessions:
        approvals = []
        for _ in range(sessions):
            handle = await runtime.start("treasurer", "escalating", principal="ada", tenant="acme")
            (pending,) = await runtime.wait_for_pending(handle.session_id)
            approvals.append(pending["approvalId"])
        print(json.dumps(approvals), flush=True)
    print("ready", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runtime.shutdown()


if __name__ == "__main__":
    asyncio.run(
        main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4] if len(sys.argv) > 4 else 0))
    )
