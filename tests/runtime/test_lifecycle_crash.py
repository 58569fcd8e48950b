"""SIGKILL in the middle of a retry and of a rewind: the applied step is never applied twice,
and a new process (same executor id and version) recovers the run and completes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helix_dbos.runtime import AgentRuntime
from helix_dbos.store.history import load_rows
from tests.runtime import lifecycle_worker
from tests.runtime.lifecycle_agents import FAILING, LifecycleLLM, lifecycle_agent

WORKER = Path(lifecycle_worker.__file__)


def _killed_midway(mode: str, url: str) -> dict[str, str]:
    """Run the worker until its retried/rewound run is inside the model call, then SIGKILL."""
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), mode, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        return dict(json.loads(line))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["retry", "rewind"])
async def test_sigkill_mid_lifecycle_recovers(db_url: str, mode: str) -> None:
    killed = _killed_midway(mode, db_url)
    sid = killed["session"]
    FAILING["on"] = False  # the provider is back
    llm = LifecycleLLM()
    runtime = AgentRuntime([lifecycle_agent(llm)], lifecycle_worker.settings(db_url))
    await runtime.launch()
    try:
        view = await runtime.wait(sid, timeout=60)
        assert view["status"] == "completed" and view["runId"] == killed["runId"]
        history = await runtime.messages(sid)
        async with runtime.store.reading():
            rows = await load_rows(sid)
        if mode == "retry":
            assert [m.content for m in history] == ["fail then hang", "echo: fail then hang"]
        else:
            assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
            assert history[-1].content.startswith("results:")
        # The lifecycle step applied once: exactly one row left the conversation.
        assert sum(1 for r in rows if r.rewound_at is not None) == 1
        assert len(rows) == len(history) + 1
        assert llm.calls == 1, "the recovered run called the model once"
    finally:
        FAILING["on"] = True
        await runtime.shutdown()
