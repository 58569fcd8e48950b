"""Server-Sent Events framing, shared by the event stream (``/sse``) and the AI SDK chat stream.

Pure: bytes in, bytes out. A frame is ``id: <n>`` (optional) and ``data: <compact JSON>``;
``json.dumps`` escapes newlines, so the data is always one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["KEEP_ALIVE", "SSE_HEADERS", "frame", "frames"]

#: A comment frame: keeps idle connections (and proxies) from timing out.
KEEP_ALIVE = b": keep-alive\n\n"

#: The response headers of every event stream.
SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    # Proxies such as nginx buffer responses by default, which would hold events back.
    "X-Accel-Buffering": "no",
}


def frame(data: Any, event_id: int | None = None) -> bytes:
    """One SSE frame carrying ``data`` as JSON."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def frames(items: Iterable[Any]) -> bytes:
    """Several frames without ids, concatenated."""
    return b"".join(frame(item) for item in items)
