"""The scrubber hook: a submitted error string is scrubbed before anything keeps or shows it."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

from helix_dbos.testing import capture_log_events

pytestmark = pytest.mark.postgres_only

SECRET = "sk-live-4f9a8b7c6d"
RAW = f"upstream refused token {SECRET} for alice@example.com"
SCRUBBED = "upstream refused token [key] for [email]"


def scrub(text: str) -> str:
    text = re.sub(r"sk-[\w-]+", "[key]", text)
    return re.sub(r"[\w.]+@[\w.]+", "[email]", text)


async def test_submitted_error_is_scrubbed_everywhere(launch: Any, pg_url: str) -> None:
    runtime = await launch(scrubber=scrub)
    with capture_log_events() as events:
        handle = await runtime.start("ops", "pick_color")
        sid = handle.session_id
        (call,) = await runtime.wait_for_pending(sid)
        await runtime.submit_tool_result(sid, call["toolCallId"], error=RAW)
        await runtime.wait(sid)

    # Stored: the conversation's tool message.
    (tool,) = [m for m in await runtime.messages(sid) if m.role == "tool"]
    assert tool.is_error and tool.content == SCRUBBED
    # Streamed: the tool_end event the client reads.
    (end,) = [e for e in await runtime.events(sid) if e.type == "tool_end"]
    assert end.data["error"] == SCRUBBED
    # Shown to the model: the request of the step after the call.
    llm = runtime.registry.get("ops").llm
    last = llm.requests[-1].messages[-1]
    assert last.role == "tool" and last.content == SCRUBBED
    # The model's reply quotes the scrubbed text only.
    assert (await runtime.status(sid))["status"] == "completed"
    # Logged: no event carries the raw text.
    assert SECRET not in json.dumps(events, default=str)
    # Nowhere in our tables: states (pending answers, tombstones), messages, events, usage.
    with psycopg.connect(pg_url) as conn:
        for table in (
            "__agents_states",
            "__agents_messages",
            "__agents_events",
            "__agents_usage",
            "__agents_checkpoints",
        ):
            hits = conn.execute(
                f"SELECT count(*) FROM {table} t WHERE t::text LIKE %s",
                (f"%{SECRET}%",),
            ).fetchone()
            assert hits == (0,), table
        (scrubbed_rows,) = conn.execute(
            "SELECT count(*) FROM __agents_messages WHERE content->>'content' = %s", (SCRUBBED,)
        ).fetchone() or (0,)
    assert scrubbed_rows == 1


async def test_without_a_scrubber_the_error_passes_through_verbatim(launch: Any) -> None:
    runtime = await launch()
    handle = await runtime.start("ops", "pick_color")
    (call,) = await runtime.wait_for_pending(handle.session_id)
    await runtime.submit_tool_result(handle.session_id, call["toolCallId"], error=RAW)
    await runtime.wait(handle.session_id)
    (tool,) = [m for m in await runtime.messages(handle.session_id) if m.role == "tool"]
    assert tool.content == RAW
