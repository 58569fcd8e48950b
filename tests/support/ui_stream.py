"""Reading an AI SDK UI message stream (``/chat``) as a client does."""

from __future__ import annotations

import json
from typing import Any

import httpx


def read_chunks(response: httpx.Response) -> list[dict[str, Any] | str]:
    """Every ``data:`` payload of a UI message stream: chunks, and the ``[DONE]`` marker."""
    out: list[dict[str, Any] | str] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[6:]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out
