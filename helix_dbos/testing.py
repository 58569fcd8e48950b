"""A test kit for users' own tests: the scripted model and log-event capture."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .llm.scripted import ScriptedLLM, call, reply
from .observability.log import logger

__all__ = ["CapturedEvent", "ScriptedLLM", "call", "capture_log_events", "reply"]

CapturedEvent = dict[str, Any]


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.events: list[CapturedEvent] = []

    def emit(self, record: logging.LogRecord) -> None:
        name = getattr(record, "event", None)
        if name is not None:
            self.events.append(
                {"event": name, "level": record.levelname, **getattr(record, "fields", {})}
            )


@contextmanager
def capture_log_events(level: int = logging.DEBUG) -> Iterator[list[CapturedEvent]]:
    """Collect helix_dbos log events (``{"event", "level", **fields}``) inside the block."""
    handler = _Capture()
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield handler.events
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
