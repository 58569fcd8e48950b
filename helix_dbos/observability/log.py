"""Structured log events through the stdlib logger ``helix_dbos``.

The library configures no logging of an application's. Event names are the seed's; every
record carries the
event name in ``extra["event"]`` and its fields in ``extra["fields"]`` (and flattened).
Per-event levels can be raised or lowered with ``set_event_level`` (for example, raise only
``client_tool.*`` to INFO), and ``set_service_name`` tags every event with ``service``.

Where nothing is configured at all (a plain script: no handler on the root logger nor on
``helix_dbos``), the warnings and errors print as one readable line on stderr,
``helix-dbos WARNING fleet.adopted executorId=... count=1``, instead of logging's last resort,
which prints the bare event name. The first handler an application installs silences it.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import sys
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "EVENT_LEVELS",
    "UNCONFIGURED_DEFAULT",
    "describe_issues",
    "logger",
    "log_event",
    "logging_configured",
    "reset_event_levels",
    "set_event_level",
    "set_service_name",
]

logger = logging.getLogger("helix_dbos")


class _UnconfiguredDefault(logging.Handler):
    """What a process that configured no logging sees of a warning: one readable line on
    stderr (``helix-dbos WARNING <event> key=value ...``). Silent once any handler is on the
    root logger or on ``helix_dbos`` (the application's, ``configure_logging``'s, a test's):
    those say it instead."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers or any(h is not self for h in logger.handlers):
            return
        try:
            sys.stderr.write(_readable(record) + "\n")
        except Exception:  # a closed stderr: nothing to say it on
            self.handleError(record)


def _readable(record: logging.LogRecord) -> str:
    event = getattr(record, "event", None)
    fields = getattr(record, "fields", None)
    if not isinstance(event, str) or not isinstance(fields, dict):
        line = f"helix-dbos {record.levelname} {record.name}: {record.getMessage()}"
    else:
        parts = [f"helix-dbos {record.levelname} {event}"]
        for key, value in fields.items():
            plain = isinstance(value, str) and value and not any(c.isspace() for c in value)
            parts.append(f"{key}={value if plain else json.dumps(value, default=str)}")
        line = " ".join(parts)
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        line += f" ({type(exc).__name__}: {exc})"
    return line


#: The one handler the library puts on ``helix_dbos``: silent once anything is configured.
UNCONFIGURED_DEFAULT = _UnconfiguredDefault()
logger.addHandler(UNCONFIGURED_DEFAULT)


def logging_configured() -> bool:
    """Whether a handler other than :data:`UNCONFIGURED_DEFAULT` would see ``helix_dbos``'s
    records (on it or on a logger above it): the application (or a host) configured logging."""
    found: logging.Logger | None = logger
    while found is not None:
        if any(h is not UNCONFIGURED_DEFAULT for h in found.handlers):
            return True
        found = found.parent if found.propagate else None
    return False


#: The seed's event names and their default levels.
EVENT_LEVELS: dict[str, int] = {
    "client_tool.suspended": logging.DEBUG,
    "client_tool.submitted": logging.DEBUG,
    "approval.decided": logging.INFO,
    "client_tool.timeout": logging.WARNING,
    "client_tool.aborted": logging.WARNING,
    "client_tool.validation_failed": logging.WARNING,
    "client_tool.submit_unknown": logging.WARNING,
    "client_tool.submit_late": logging.WARNING,
    "client_tool.ownership_write_failed": logging.ERROR,
    "client_tool.ownership_clear_failed": logging.ERROR,
    "client_tool.clear_failed_exhausted": logging.ERROR,
    "client_tool.ownership_retry": logging.DEBUG,
    "client_tool.clear_pending_retry": logging.DEBUG,
    "client_tool.send_event_failed": logging.ERROR,
    "client_tool.deadline_near": logging.INFO,
    "notification.delivered": logging.DEBUG,
    "notification.hook_failed": logging.WARNING,
    "notification.gave_up": logging.ERROR,
    "notification.dispatch_failed": logging.WARNING,
    "persistent.delivered": logging.DEBUG,
    "persistent.mark_stale": logging.WARNING,
    "companion.send": logging.INFO,
    "companion.replied": logging.DEBUG,
    "companion.ended": logging.INFO,
    "companion.woke_parent": logging.INFO,
    "companion.adopt_failed": logging.WARNING,
    "server.body_too_large": logging.WARNING,
    "submit_tool_result.result_too_large": logging.WARNING,
    "turn.summary": logging.INFO,
    "turn.error_detail": logging.WARNING,
    "turn.model_retry": logging.WARNING,
    "turn.start_failed": logging.ERROR,
    "runtime.start_failed": logging.ERROR,
    "turn.hibernated": logging.DEBUG,
    "turn.continuation_due": logging.INFO,
    "turn.continuation_start_failed": logging.WARNING,
    "turn.deadline_keeper_failed": logging.WARNING,
    "runtime.workflows_released": logging.INFO,
    "session.healed": logging.WARNING,
    "store.retrying": logging.WARNING,
    "server.unauthenticated": logging.WARNING,
    "fleet.adopted": logging.WARNING,
    "fleet.adoption_skipped": logging.WARNING,
    "fleet.executor_restarted": logging.INFO,
    "fleet.forwarded": logging.WARNING,
    "fleet.turns_stranded": logging.ERROR,
    "fleet.turn_stranded": logging.ERROR,
    "fleet.executor_id_reused": logging.WARNING,
    "fleet.executor_reclaimed": logging.WARNING,
    "fleet.sweep_failed": logging.ERROR,
    "fleet.stop_mark_failed": logging.WARNING,
    "events.listener_lost": logging.WARNING,
    "server.store_unavailable": logging.WARNING,
    "server.bad_request": logging.INFO,
    "runtime.started": logging.INFO,
    "mcp.list_failed": logging.WARNING,
    "mcp.call_retry": logging.WARNING,
}

_overrides: list[tuple[str, int]] = []
_service: str | None = None


def set_event_level(pattern: str, level: int | str) -> None:
    """Emit events matching ``pattern`` (``fnmatch``, e.g. ``client_tool.*``) at ``level``."""
    lvl = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(lvl, int):
        raise ValueError(f"Unknown log level {level!r}")
    _overrides.insert(0, (pattern, lvl))


def reset_event_levels() -> None:
    """Forget every ``set_event_level`` override."""
    _overrides.clear()


def set_service_name(name: str | None) -> None:
    """Tag every event with ``service=name`` (``None`` removes the tag)."""
    global _service
    _service = name


def _level_of(name: str) -> int:
    for pattern, level in _overrides:
        if fnmatch.fnmatchcase(name, pattern):
            return level
    return EVENT_LEVELS.get(name, logging.INFO)


def log_event(name: str, **fields: Any) -> None:
    """Log the event ``name`` with structured ``fields`` at its configured level."""
    level = _level_of(name)
    if not logger.isEnabledFor(level):
        return
    if _service is not None:
        fields.setdefault("service", _service)
    logger.log(level, name, extra={"event": name, "fields": fields, **_flat(fields)})


_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
}


def _flat(fields: dict[str, Any]) -> dict[str, Any]:
    # Flattened copies for formatters that read record attributes; reserved names are skipped.
    return {k: v for k, v in fields.items() if k not in _RESERVED and k not in ("event", "fields")}


def describe_issues(issues: Iterable[Mapping[str, Any]], limit: int = 5) -> str:
    """Validation issues (pydantic's ``errors()``) as one short text for a log line:
    ``where: why`` each, ``; ``-separated. Never the submitted value: only ``loc`` and
    ``msg`` are read (a value is the caller's data and may be large or private)."""
    parts = []
    for issue in issues:
        loc = ".".join(str(p) for p in issue.get("loc", ())) or "(body)"
        parts.append(f"{loc}: {issue.get('msg', 'invalid')}")
    more = len(parts) - limit
    return "; ".join(parts[:limit]) + (f"; and {more} more" if more > 0 else "")
