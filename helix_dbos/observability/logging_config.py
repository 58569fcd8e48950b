"""Log output for a process that runs the server (``helix-dbos serve``).

The library itself never configures logging; an application that embeds it keeps its own.
``configure_logging`` is what the standalone server calls: one line per record on stderr,

* ``text``: ``2026-11-30T14:12:36.123Z INFO client_tool.suspended sessionId=ses_1 ...`` (an
  event's name and its fields; any other record: its logger and message);
* ``json``: one JSON object per line with ``time``, ``level``, ``event`` (or ``logger`` and
  ``message``) and the event's fields.

``HELIX_LOG_LEVEL`` (case-insensitive; default ``info``) sets the level of helix-dbos's events:
``debug`` shows ``client_tool.suspended`` and ``client_tool.submitted``. ``DBOS_LOG_LEVEL``
sets DBOS's own logger separately (default ``warning``, via ``HelixSettings``).

Credentials in a request's query string never reach the access log: ``QuerySecretFilter``
(installed by ``configure_logging`` and by ``create_app`` on ``uvicorn.access``) writes
``token=***`` for the session token a browser's stream passes as ``?token=``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from typing import Any, TextIO
from urllib.parse import unquote_plus

from ..errors import ConfigError

__all__ = [
    "LOG_FORMATS",
    "LOG_LEVEL_ENV",
    "EventFormatter",
    "JsonEventFormatter",
    "QuerySecretFilter",
    "StoppedTurnFilter",
    "configure_logging",
    "install_query_secret_filter",
    "mask_query_secrets",
    "parse_level",
]

#: The variable naming the level of helix-dbos's own events.
LOG_LEVEL_ENV = "HELIX_LOG_LEVEL"
#: The accepted ``--log-format`` values.
LOG_FORMATS = ("text", "json")

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
#: The loggers ``configure_logging`` routes through its handler.
_LOGGERS = ("helix_dbos", "dbos", "uvicorn", "uvicorn.error", "uvicorn.access")
_HANDLER_NAME = "helix-dbos-console"


#: DBOS's errors for a workflow that was cancelled: how an interrupt or abort stops a turn.
_CANCELLED = frozenset({"DBOSAwaitedWorkflowCancelledError", "DBOSWorkflowCancelledError"})


class StoppedTurnFilter(logging.Filter):
    """An interrupt or abort is not an error: DBOS logs the cancelled turn workflow as an
    ERROR with its traceback; this makes it one DEBUG line (``turn.summary`` already says
    ``outcome=interrupted`` or ``failed``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or type(exc).__name__ not in _CANCELLED:
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        record.msg, record.args = f"{record.getMessage()} {exc}", None
        record.exc_info, record.exc_text = None, None
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


#: Query parameters whose value is a credential, by their DECODED name (any case, any prefix:
#: access_token).
_SECRET_NAME = re.compile(
    r"token|secret|passw|api[-_]?key|signature|^auth(orization)?$|^sig$|^key$", re.IGNORECASE
)
#: A value shaped like a signed token: a session token (``payload.signature``) or a JWT.
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}(\.[A-Za-z0-9_-]+)?")
#: One ``name=value`` of a query string (``value`` up to the next ``&``, space or ``#``).
_QUERY_PARAM = re.compile(r"(?P<sep>[?&;])(?P<name>[^=&\s#]+)=(?P<value>[^&\s#]*)")
MASK = "***"


def mask_query_secrets(text: str) -> str:
    """``text`` with every credential in a query string replaced by ``***``: a parameter
    named like one (``token``, ``access_token``, ``api_key``, ``password``, ...) or whose
    value has a signed token's shape, under any name."""

    def mask(match: re.Match[str]) -> str:
        name, value = match["name"], match["value"]
        # The server reads names and values percent-decoded (``%74oken`` is ``token``, ``+``
        # a space), so the mask judges what the server reads, not the bytes on the wire.
        secret_name = _SECRET_NAME.search(unquote_plus(name).strip())
        if not value or not (secret_name or _TOKEN_SHAPE.fullmatch(unquote_plus(value))):
            return match[0]
        return f"{match['sep']}{name}={MASK}"

    return _QUERY_PARAM.sub(mask, text) if "=" in text else text


class QuerySecretFilter(logging.Filter):
    """Masks credentials in the query strings of a record's arguments (uvicorn's access log
    passes the path with its query as one argument) and of its message."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                mask_query_secrets(a) if isinstance(a, str) else a for a in record.args
            )
        if isinstance(record.msg, str):
            record.msg = mask_query_secrets(record.msg)
        return True


_ACCESS_LOGGER = "uvicorn.access"


def install_query_secret_filter(logger_name: str = _ACCESS_LOGGER) -> None:
    """Add one ``QuerySecretFilter`` to ``logger_name`` (uvicorn's access log), whatever
    handlers an app configures; calling it again adds none."""
    log = logging.getLogger(logger_name)
    if not any(isinstance(f, QuerySecretFilter) for f in log.filters):
        log.addFilter(QuerySecretFilter())


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted (as logging's last
    resort does), so a replaced or closed stderr is never held on to."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def parse_level(value: str, variable: str = LOG_LEVEL_ENV) -> int:
    """A level name, in any case (``debug``, ``INFO``, ``Warning``, ...).

    Raises:
        ConfigError: not a level name.
    """
    level = _LEVELS.get(value.strip().lower())
    if level is None:
        raise ConfigError(
            f"{variable}={value!r} is not a log level: use debug, info, warning or error"
        )
    return level


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return dict(fields) if isinstance(fields, dict) else {}


def _value(value: Any) -> str:
    if isinstance(value, str) and value and not any(c.isspace() or c in '"=' for c in value):
        return value
    return json.dumps(value, default=str, ensure_ascii=False)


class EventFormatter(logging.Formatter):
    """``<time> <LEVEL> <event> key=value ...``; other records ``<time> <LEVEL> <logger>:
    <message>``. A traceback, when a record carries one, follows on its own lines."""

    def format(self, record: logging.LogRecord) -> str:
        head = f"{_timestamp(record)} {record.levelname}"
        event = getattr(record, "event", None)
        if isinstance(event, str):
            parts = [head, event]
            parts += [f"{k}={_value(v)}" for k, v in _fields(record).items()]
            line = " ".join(parts)
            message = record.getMessage()
            if message != event:
                line += f" message={_value(message)}"
        else:
            line = f"{head} {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonEventFormatter(logging.Formatter):
    """One JSON object per record: ``time``, ``level``, ``event`` and its fields, or
    ``logger`` and ``message``; ``exception`` holds a traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"time": _timestamp(record), "level": record.levelname}
        event = getattr(record, "event", None)
        if isinstance(event, str):
            out["event"] = event
            for key, value in _fields(record).items():
                out.setdefault(key, value)
            message = record.getMessage()
            if message != event:
                out.setdefault("message", message)
        else:
            out["logger"] = record.name
            out["message"] = record.getMessage()
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def configure_logging(
    fmt: str = "text",
    level: str | None = None,
    *,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send helix-dbos's events, DBOS's and uvicorn's logs to ``stream`` (stderr), one line
    each, in ``fmt`` (``text`` or ``json``).

    ``level`` is helix-dbos's level (default ``HELIX_LOG_LEVEL``, else ``info``). DBOS's level
    is its own (``DBOS_LOG_LEVEL``, applied when the runtime launches DBOS). Calling it again
    replaces the handler it installed.

    Raises:
        ConfigError: an unknown format or level.
    """
    if fmt not in LOG_FORMATS:
        raise ConfigError(f"Unknown log format {fmt!r}: use {' or '.join(LOG_FORMATS)}")
    raw = level if level is not None else os.environ.get(LOG_LEVEL_ENV, "").strip() or "info"
    helix_level = parse_level(raw)
    handler: logging.Handler = (
        logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    )
    handler.name = _HANDLER_NAME
    handler.setFormatter(JsonEventFormatter() if fmt == "json" else EventFormatter())
    handler.addFilter(StoppedTurnFilter())
    # On the logger, not the handler: records of uvicorn.access are masked before any handler
    # (ours or an app's) sees them.
    install_query_secret_filter()
    for name in _LOGGERS:
        log = logging.getLogger(name)
        for old in [h for h in log.handlers if h.name == _HANDLER_NAME]:
            log.removeHandler(old)
        if name in ("uvicorn.error", "uvicorn.access"):
            # They propagate to "uvicorn", which has the handler, and take its level.
            log.propagate = True
            log.setLevel(logging.NOTSET)
            continue
        for dbos_console in [h for h in log.handlers if h.name == "__dbos_console_log_handler__"]:
            log.removeHandler(dbos_console)
        log.addHandler(handler)
        # Our handler is the only output: DBOS adds its own console handler only to a logger
        # that has none, and records do not reach the root logger twice.
        log.propagate = False
    logging.getLogger("helix_dbos").setLevel(helix_level)
    # uvicorn's startup lines (the URL it serves) and its access log are INFO.
    logging.getLogger("uvicorn").setLevel(logging.INFO)
    return handler
