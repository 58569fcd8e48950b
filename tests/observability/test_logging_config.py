"""The server's log output: formats, levels (any case), and a stopped turn that is no ERROR."""

from __future__ import annotations

import io
import json
import logging

import pytest

from helix_dbos.config import HelixSettings
from helix_dbos.errors import ConfigError
from helix_dbos.observability.log import log_event
from helix_dbos.observability.logging_config import configure_logging, parse_level


class DBOSAwaitedWorkflowCancelledError(Exception):
    """Stands in for DBOS's error of the same name (the filter matches by name)."""


def test_parse_level_is_case_insensitive_and_refuses_unknown_names() -> None:
    assert parse_level("debug") == parse_level("DEBUG") == parse_level(" Debug ") == logging.DEBUG
    assert parse_level("warn") == logging.WARNING
    with pytest.raises(ConfigError, match="HELIX_LOG_LEVEL"):
        parse_level("loud")


@pytest.mark.usefixtures("restore_logging")
def test_text_lines_carry_time_level_event_and_fields() -> None:
    out = io.StringIO()
    # Another library (or an earlier server in this process) left uvicorn's logger quiet.
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    configure_logging("text", "debug", stream=out)
    log_event("client_tool.suspended", sessionId="ses_1", toolCallId="c 1", deadlineAt=5)
    logging.getLogger("uvicorn.error").info("Uvicorn running on http://127.0.0.1:1")
    first, second = out.getvalue().splitlines()
    stamp, level, event, *fields = first.split(" ")
    assert stamp.endswith("Z") and "T" in stamp and level == "DEBUG"
    assert event == "client_tool.suspended"
    assert fields == ["sessionId=ses_1", 'toolCallId="c', '1"', "deadlineAt=5"]
    assert second.split(" ", 2)[1:] == [
        "INFO",
        "uvicorn.error: Uvicorn running on http://127.0.0.1:1",
    ]


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_and_the_level_gate() -> None:
    out = io.StringIO()
    configure_logging("json", "INFO", stream=out)
    log_event("client_tool.suspended", sessionId="ses_1")  # debug: below the level
    log_event("turn.summary", sessionId="ses_1", outcome="interrupted")
    (line,) = out.getvalue().splitlines()
    record = json.loads(line)
    assert record["level"] == "INFO" and record["event"] == "turn.summary"
    assert record["sessionId"] == "ses_1" and record["outcome"] == "interrupted"
    assert record["time"].endswith("Z")
    with pytest.raises(ConfigError):
        configure_logging("yaml")


@pytest.mark.usefixtures("restore_logging")
def test_a_cancelled_turn_workflow_is_not_an_error() -> None:
    """DBOS logs a cancelled workflow (an interrupt or abort) as an ERROR with a traceback;
    the server shows it as one DEBUG line, and only when DBOS's level is debug."""
    out = io.StringIO()
    configure_logging("text", "info", stream=out)
    dbos = logging.getLogger("dbos")
    dbos.setLevel(logging.WARNING)
    try:
        raise DBOSAwaitedWorkflowCancelledError("Awaited workflow helix:s:r was cancelled")
    except DBOSAwaitedWorkflowCancelledError as exc:
        dbos.error("Exception encountered in asynchronous workflow:", exc_info=exc)
        assert out.getvalue() == ""
        dbos.setLevel(logging.DEBUG)
        dbos.error("Exception encountered in asynchronous workflow:", exc_info=exc)
    (line,) = out.getvalue().splitlines()
    assert " DEBUG dbos: Exception encountered" in line and "was cancelled" in line
    try:
        raise RuntimeError("a real failure")
    except RuntimeError as exc:
        dbos.error("Exception encountered in asynchronous workflow:", exc_info=exc)
    assert " ERROR dbos: " in out.getvalue() and "Traceback" in out.getvalue()


def test_dbos_log_level_is_its_own_variable_in_any_case() -> None:
    """DBOS_LOG_LEVEL sets DBOS's level (upper-cased for logging); HELIX_LOG_LEVEL does not."""
    assert HelixSettings.from_env({"DBOS_LOG_LEVEL": "debug"}).dbos_log_level == "DEBUG"
    assert HelixSettings.from_env({"HELIX_LOG_LEVEL": "debug"}).dbos_log_level == "WARNING"
    with pytest.raises(ConfigError, match="DBOS_LOG_LEVEL"):
        HelixSettings.from_env({"DBOS_LOG_LEVEL": "loud"})
