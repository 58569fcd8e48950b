"""What a parked turn holds: thousands park at once, so each one's memory is a budget.

The test parks turns whose client call carries a large input and measures, with tracemalloc,
what the parking allocated and still holds, counting what our own code allocated (and the
generator-based context managers and OpenTelemetry objects it used to keep open across the
park). DBOS's own share (its workflow context, its waiter) is not ours to cut and is left out.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import helix_dbos
from helix_dbos.core import define_agent, define_tool
from helix_dbos.core.llm import LLMRequest, LLMResponse
from helix_dbos.llm.scripted import ScriptedLLM, call, reply
from tests.runtime.agents import EditIn, EditOut

try:
    from opentelemetry import trace as otel_trace
except ImportError:  # tracing is optional
    otel_trace = None  # type: ignore[assignment]

from .conftest import MakeRuntime

#: A client call's input: a file's worth of text (a parked turn need not keep it).
INPUT_CHARS = 16_384
PARKED = 40
#: Bytes per parked turn our code may hold (measured 3.9-4.3 KiB: mostly the coroutine
#: frames of the turn, its plan item and ids, and the batch it publishes for its submit's
#: job, ``handover.ParkedBatch``; before, 7.7 KiB plus the call's input, which this catches).
BUDGET = 4.5 * 1024

_OURS = (str(Path(helix_dbos.__file__).parent), __file__, "contextlib.py", "opentelemetry")


def _big_edit(request: LLMRequest) -> LLMResponse:
    if request.messages[-1].role == "user":
        return call(request, ("edit", {"text": "x" * INPUT_CHARS}))
    return reply("done")


def _ours(snapshot: tracemalloc.Snapshot) -> tracemalloc.Snapshot:
    return snapshot.filter_traces(
        [tracemalloc.Filter(True, f"*{part}*") for part in _OURS]  # any of them
    )


async def _park(runtime: Any, n: int) -> list[str]:
    sessions = []
    for _ in range(n):
        handle = await runtime.start("big", "go")
        sessions.append(handle.session_id)
        while handle.workflow_id not in runtime.ctx.parked:
            await asyncio.sleep(0.001)
    return sessions


async def test_a_parked_turn_holds_little_and_not_its_calls_input(
    make_runtime: MakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Measured as the library runs by default, with no tracer provider: another test may have
    # installed a recording one for the process (its open wait spans hold about 6 KiB more
    # per parked turn, the price of tracing parked calls).
    if otel_trace is not None:
        noop = otel_trace.NoOpTracer()
        monkeypatch.setattr(otel_trace, "get_tracer", lambda *_a, **_k: noop)
    agent = define_agent(
        "big",
        llm=ScriptedLLM(_big_edit, keep_requests=0),
        tools=[define_tool("edit", "Apply an edit", EditIn, EditOut, execute="client")],
        client_tool_timeout=300,
    )
    # No reconciler pass in the middle of the measurement (it reads sessions for a moment).
    runtime = await make_runtime([agent], heal_interval_seconds=0)
    for sid in await _park(runtime, 3):  # first-use allocations are not a turn's
        (entry,) = await runtime.wait_for_pending(sid)
        await runtime.submit_tool_result(sid, entry["toolCallId"], result={"applied": 1})
        await runtime.wait(sid)
    gc.collect()
    tracemalloc.start(1)
    try:
        before = _ours(tracemalloc.take_snapshot())
        sessions = await _park(runtime, PARKED)
        gc.collect()
        after = _ours(tracemalloc.take_snapshot())
    finally:
        tracemalloc.stop()
    stats = after.compare_to(before, "filename")
    held = sum(s.size_diff for s in stats) / PARKED
    detail = {s.traceback[0].filename: round(s.size_diff / PARKED) for s in stats[:8]}
    assert held <= BUDGET, f"{held:.0f} B per parked turn: {detail}"
    assert len(runtime.ctx.parked) == PARKED
    for sid in sessions:  # they were parked all along, and finish normally
        (entry,) = await runtime.wait_for_pending(sid)
        await runtime.submit_tool_result(sid, entry["toolCallId"], result={"applied": 1})
        assert (await runtime.wait(sid))["status"] == "completed"
