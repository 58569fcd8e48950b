"""Structured log events (``observability/log.py``): names, levels by pattern, the service tag,
fields on the record, and validation issues described without the values."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from helix_dbos.observability.log import (
    EVENT_LEVELS,
    describe_issues,
    log_event,
    logger,
    set_event_level,
    set_service_name,
)
from helix_dbos.testing import capture_log_events


class Records(logging.Handler):
    """The raw records the ``helix_dbos`` logger emits."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    handler = Records()
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def test_an_event_is_one_record_with_its_fields(records: list[logging.LogRecord]) -> None:
    """The message is the event's name; fields are kept together and flattened."""
    log_event("client_tool.timeout", sessionId="s", toolCallId="c")
    [record] = records
    assert (record.getMessage(), record.levelno) == ("client_tool.timeout", logging.WARNING)
    assert record.event == "client_tool.timeout"  # type: ignore[attr-defined]
    assert record.fields == {"sessionId": "s", "toolCallId": "c"}  # type: ignore[attr-defined]
    assert record.sessionId == "s"  # type: ignore[attr-defined]


def test_fields_named_like_record_attributes_do_not_break_logging(
    records: list[logging.LogRecord],
) -> None:
    """``message``, ``msg``, ``module``... would make the stdlib raise or garble the record:
    they stay in ``fields`` only, and the record's own attributes are untouched."""
    log_event("turn.summary", message="m", msg="x", module="y", levelname="X", event="e", fields=2)
    [record] = records
    assert (record.getMessage(), record.levelname) == ("turn.summary", "INFO")
    assert record.module == "log"
    assert record.event == "turn.summary"  # type: ignore[attr-defined]
    assert record.fields == {  # type: ignore[attr-defined]
        "message": "m",
        "msg": "x",
        "module": "y",
        "levelname": "X",
        "event": "e",
        "fields": 2,
    }


def test_unknown_events_log_at_info() -> None:
    """An event without a default level is INFO (new events are seen, not silently dropped)."""
    with capture_log_events() as events:
        log_event("something.new", x=1)
    assert events == [{"event": "something.new", "level": "INFO", "x": 1}]


def test_levels_follow_the_table_and_a_disabled_level_costs_nothing() -> None:
    """At WARNING, a DEBUG event is not emitted; a WARNING one is."""
    assert EVENT_LEVELS["client_tool.suspended"] == logging.DEBUG
    with capture_log_events(logging.WARNING) as events:
        log_event("client_tool.suspended")
        log_event("client_tool.timeout")
    assert [e["event"] for e in events] == ["client_tool.timeout"]


def test_the_newest_matching_override_wins() -> None:
    """Patterns are ``fnmatch`` on the full name; a later override beats an earlier one,
    and names the pattern does not match keep their default."""
    set_event_level("client_tool.*", logging.ERROR)
    set_event_level("client_tool.suspended", "info")
    with capture_log_events() as events:
        log_event("client_tool.suspended")
        log_event("client_tool.submitted")
        log_event("turn.summary")
        log_event("client_tool")
    assert [(e["event"], e["level"]) for e in events] == [
        ("client_tool.suspended", "INFO"),
        ("client_tool.submitted", "ERROR"),
        ("turn.summary", "INFO"),
        ("client_tool", "INFO"),
    ]


def test_an_unknown_level_name_is_refused() -> None:
    """A typo is an error at configuration time, not events at a strange level."""
    with pytest.raises(ValueError, match="Unknown log level 'loud'"):
        set_event_level("*", "loud")


def test_the_service_tag_is_added_but_never_overrides_a_field() -> None:
    """Every event carries ``service`` once set; an event's own ``service`` field wins;
    ``None`` removes the tag."""
    set_service_name("billing")
    with capture_log_events() as events:
        log_event("turn.summary")
        log_event("turn.summary", service="own")
        set_service_name(None)
        log_event("turn.summary")
    assert [e.get("service") for e in events] == ["billing", "own", None]


def test_issues_are_described_by_place_and_reason_only() -> None:
    """``loc: msg`` each; the submitted value never appears; an empty location is the body."""
    issues: list[dict[str, Any]] = [
        {"loc": ("edits", 0, "find"), "msg": "Field required", "input": "SECRET"},
        {"loc": (), "msg": "Input should be an object", "input": ["SECRET"]},
        {"type": "missing"},
    ]
    text = describe_issues(issues)
    assert (
        text == "edits.0.find: Field required; (body): Input should be an object; (body): invalid"
    )
    assert "SECRET" not in text


def test_issues_beyond_the_limit_are_counted() -> None:
    """The first ``limit`` are described, the rest counted."""
    issues = [{"loc": (f"f{i}",), "msg": "bad"} for i in range(7)]
    assert describe_issues(issues, limit=2) == "f0: bad; f1: bad; and 5 more"
    assert describe_issues(issues[:2], limit=2) == "f0: bad; f1: bad"
    assert describe_issues([]) == ""


_SCRIPT = """
import logging, sys
from helix_dbos.observability.log import log_event
log_event("fleet.adopted", executorId="exec-1", count=1, workflowIds=["helix:ses_1:run_1"])
log_event("turn.summary", outcome="completed")  # INFO: not shown unless configured
if sys.argv[1] == "configured":
    logging.basicConfig(format="APP %(levelname)s %(message)s")
    log_event("fleet.adopted", executorId="exec-2", count=2, workflowIds=[])
"""


@pytest.mark.parametrize("mode", ["plain", "configured"])
def test_a_plain_script_sees_warnings_as_readable_lines(mode: str) -> None:
    """With no logging configured, a warning is one readable line (the event and its fields),
    not logging's last resort's bare event name; once the script configures logging, only its
    own handlers print."""
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (
        'helix-dbos WARNING fleet.adopted executorId=exec-1 count=1 workflowIds=["helix:ses_1:run_1"]'
    )
    assert "turn.summary" not in done.stderr
    assert lines[1:] == ([] if mode == "plain" else ["APP WARNING fleet.adopted"])
