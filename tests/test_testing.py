"""The test kit (``helix_dbos.testing``): ``capture_log_events`` collects the framework's log
events inside its block, at the level asked, and leaves the logger as it found it."""

from __future__ import annotations

import logging

import pytest

from helix_dbos.observability.log import log_event, logger
from helix_dbos.testing import capture_log_events


def test_events_inside_the_block_are_collected_with_their_fields() -> None:
    """``{"event", "level", **fields}`` each, in order; nothing from after the block."""
    with capture_log_events() as events:
        log_event("client_tool.suspended", sessionId="s", toolCallId="c")
        log_event("client_tool.timeout", toolCallId="c")
    log_event("client_tool.timeout", toolCallId="late")
    assert events == [
        {"event": "client_tool.suspended", "level": "DEBUG", "sessionId": "s", "toolCallId": "c"},
        {"event": "client_tool.timeout", "level": "WARNING", "toolCallId": "c"},
    ]


def test_records_that_are_not_events_are_left_out() -> None:
    """A plain log line of the ``helix_dbos`` logger has no event name: not collected."""
    with capture_log_events() as events:
        logger.warning("plain text")
        log_event("turn.summary")
    assert [e["event"] for e in events] == ["turn.summary"]


def test_the_level_filters_what_is_collected() -> None:
    """At WARNING, DEBUG and INFO events are not collected."""
    with capture_log_events(logging.WARNING) as events:
        log_event("client_tool.suspended")
        log_event("turn.summary")
        log_event("client_tool.timeout")
    assert [e["event"] for e in events] == ["client_tool.timeout"]


def test_the_logger_is_restored_even_when_the_block_fails() -> None:
    """Its handlers and level are put back: a failing test leaves no capture behind."""
    handlers, level = list(logger.handlers), logger.level
    with pytest.raises(RuntimeError), capture_log_events(logging.INFO):
        assert logger.level == logging.INFO
        raise RuntimeError("boom")
    assert (logger.handlers, logger.level) == (handlers, level)


def test_captures_nest() -> None:
    """An inner capture sees its own block; the outer one sees both blocks."""
    with capture_log_events() as outer:
        log_event("turn.summary", n=1)
        with capture_log_events() as inner:
            log_event("turn.summary", n=2)
    assert [e["n"] for e in inner] == [2]
    assert [e["n"] for e in outer] == [1, 2]
