"""Server-Sent Events framing (``http/frames.py``): one ``data:`` line of compact JSON per
frame, an optional ``id:``, frames that a reader splits back exactly."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from helix_dbos.http.frames import KEEP_ALIVE, SSE_HEADERS, frame, frames
from tests.support.strategies import json_values


def parse(stream: bytes) -> list[tuple[int | None, Any]]:
    """What an SSE reader gets: ``(id, data)`` per frame; comments skipped."""
    out: list[tuple[int | None, Any]] = []
    for block in stream.decode().split("\n\n")[:-1]:
        event_id, data = None, None
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            field, _, text = line.partition(": ")
            if field == "id":
                event_id = int(text)
            elif field == "data":
                data = json.loads(text)
        if not block.startswith(":"):
            out.append((event_id, data))
    return out


def test_the_form_of_a_frame() -> None:
    """Compact JSON, an ``id`` line first when given, a blank line to end it."""
    assert frame({"a": [1, 2]}) == b'data: {"a":[1,2]}\n\n'
    assert frame("x", event_id=0) == b'id: 0\ndata: "x"\n\n'
    assert frames([1, None]) == b"data: 1\n\ndata: null\n\n"
    assert frames([]) == b""


@given(json_values, st.none() | st.integers(min_value=0))
def test_a_frame_is_one_data_line_that_reads_back(data: Any, event_id: int | None) -> None:
    """Whatever the JSON holds (newlines, blank lines, non-ASCII text), the frame has exactly
    one ``data:`` line and a reader gets the value and the id back."""
    raw = frame(data, event_id)
    assert raw.endswith(b"\n\n") and raw.count(b"\n\n") == 1
    lines = raw.decode().split("\n")[:-2]
    assert [line.split(":")[0] for line in lines] == (
        ["data"] if event_id is None else ["id", "data"]
    )
    assert parse(raw) == [(event_id, data)]


@given(st.lists(json_values, max_size=5))
def test_frames_concatenate_and_split_back(items: list[Any]) -> None:
    """Several frames read back as the items, in order, each without an id, even with a
    keep-alive comment between them."""
    assert parse(frames(items)) == [(None, item) for item in items]
    assert parse(KEEP_ALIVE + frames(items) + KEEP_ALIVE) == [(None, item) for item in items]


def test_the_headers_keep_the_stream_unbuffered() -> None:
    """No caching, and proxies told not to buffer (an event held back is a late event)."""
    assert SSE_HEADERS == {
        "Cache-Control": "no-cache",
        "Connection": "keep-alive",
        "X-Accel-Buffering": "no",
    }
    assert KEEP_ALIVE.startswith(b":") and KEEP_ALIVE.endswith(b"\n\n")
