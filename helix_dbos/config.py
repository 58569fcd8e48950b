"""One settings object for the runtime, read from ``HELIX_*`` environment variables.

=============================  ==========================================================
Variable                       Meaning (default)
=============================  ==========================================================
``HELIX_DATABASE_URL``         Postgres (``postgresql://`` / ``postgres://``) or
                               ``sqlite:///path``. Our tables and DBOS's system tables share
                               it (DBOS in its own ``dbos`` schema). Default: the embedded
                               ``sqlite:///helix.sqlite`` in the working directory.
``HELIX_APP_NAME``             DBOS application name (``helix-dbos``).
``HELIX_EXECUTOR_ID``          This process's DBOS executor id; unique per live process
                               (default: generated, ``<host>-<pid>-<random>``, and recorded
                               in ``__agents_executors``). See docs/fleet.md.
``HELIX_APP_VERSION``          DBOS application version (default: the durable contract's
                               ``CONTRACT_VERSION``, never the package version or a hash of
                               the source, so upgrades and code changes strand no turn).
``HELIX_FORWARD_VERSIONS``     Comma-separated application versions whose parked turns this
                               process moves forward to its own version once no process of
                               theirs is alive (default: ``REPLAYABLE_VERSIONS``).
``HELIX_HEARTBEAT_SECONDS``    How often a process records that it is alive (3).
``HELIX_ADOPT_AFTER_SECONDS``  Silence after which a process counts as dead and its parked
                               turns are adopted by a live one (15).
``HELIX_MAX_RESULT_BYTES``     Submit size limit, UTF-8 bytes of the JSON result (1000000).
``HELIX_STORE_MAX_STATE_BYTES`` Optional limit on a session's stored pending map.
``HELIX_RUN_MIGRATIONS``       Run migrations at startup under a lock (``true``); ``false``
                               only checks the schema and names the command to run.
``HELIX_MAX_EXECUTOR_THREADS`` Bound on DBOS's thread pool (64).
``HELIX_SQLITE_POLL_SECONDS``  SQLite wake-up polling interval (0.05).
``HELIX_RETENTION``            How long ended sessions are kept (``30d``, ``12h``...; default
                               none: nothing is deleted). docs/retention.md.
``HELIX_RETENTION_BY_AGENT``   Per agent: ``support=7d,audit=never`` (over the default).
``HELIX_DECISION_RETENTION_DAYS`` How long the approval decision record is kept (days): the
                               retention sweeper and ``helix-dbos prune`` delete older
                               decisions (unset: kept for ever).
``DBOS_LOG_LEVEL``             DBOS's own log level (``WARNING``; any case).
=============================  ==========================================================

``HELIX_LOG_LEVEL`` (helix-dbos's own events) is read by ``helix-dbos serve``'s logging
setup, not here: the library never configures logging (``observability/logging_config.py``).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from .core.contract import CONTRACT_VERSION, REPLAYABLE_VERSIONS
from .core.pg_url import canonical
from .errors import ConfigError

__all__ = [
    "DEFAULT_MAX_RESULT_BYTES",
    "DatabaseUrls",
    "HelixSettings",
    "generate_executor_id",
    "parse_database_url",
    "parse_duration",
    "redact_url",
]

DEFAULT_MAX_RESULT_BYTES = 1_000_000
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def generate_executor_id() -> str:
    """A fresh executor id, unique per process: ``<host>-<pid>-<random>``."""
    host = _ID_UNSAFE.sub("-", socket.gethostname())[:40].strip("-") or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


DEFAULT_SQLITE_URL = "sqlite:///helix.sqlite"


@dataclass(frozen=True)
class DatabaseUrls:
    """One user-facing URL mapped to the drivers we ship."""

    user: str
    """The URL as given (normalized scheme)."""
    sync: str
    """For SQLAlchemy's sync engine and Alembic."""
    async_: str
    """For SQLAlchemy's async engine (the session store)."""
    dbos: str
    """For DBOS's system database."""
    dialect: str
    """``postgresql`` or ``sqlite``."""

    @property
    def is_sqlite(self) -> bool:
        """Whether this is the embedded SQLite backend."""
        return self.dialect == "sqlite"


_PASSWORD = re.compile(r"(?<=:)[^:@/]*(?=@)")


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***``, for messages and logs."""
    return _PASSWORD.sub("***", url)


def parse_database_url(url: str) -> DatabaseUrls:
    """Accept the forms users paste and map them to our drivers.

    ``postgresql://``, ``postgres://``, ``postgresql+psycopg://`` and ``sqlite:///path``. A
    Postgres URL naming several hosts, in any form libpq or SQLAlchemy reads, becomes the
    query form every driver reads alike, and gets a ``connect_timeout`` when it sets none
    (``core/pg_url.py``).

    Raises:
        ConfigError: any other scheme, a URL without a database, or one whose hosts mix the
            multi-host forms (the message names the form to use).
    """
    url = url.strip()
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigError(
            f"Not a database URL: {redact_url(url)!r} (expected postgresql://... or sqlite:///...)"
        )
    scheme = scheme.lower()
    if scheme in ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"):
        if "/" not in rest or not rest.split("/", 1)[1].split("?")[0]:
            raise ConfigError(f"The Postgres URL names no database: {redact_url(url)!r}")
        rest = canonical(rest)  # several hosts: the query form; a connect timeout
        base = f"postgresql://{rest}"
        driver = f"postgresql+psycopg://{rest}"
        return DatabaseUrls(base, driver, driver, base, "postgresql")
    if scheme in ("sqlite", "sqlite+aiosqlite", "sqlite+pysqlite"):
        if not rest.startswith("/") or rest == "/":
            raise ConfigError(
                f"A SQLite URL is sqlite:///relative/path or sqlite:////abs: {redact_url(url)!r}"
            )
        path = rest[1:]
        if path == ":memory:":
            raise ConfigError("An in-memory SQLite database cannot be shared with DBOS")
        return DatabaseUrls(
            f"sqlite:///{path}",
            f"sqlite:///{path}",
            f"sqlite+aiosqlite:///{path}",
            f"sqlite:///{path}",
            "sqlite",
        )
    raise ConfigError(
        f"Unsupported database URL scheme {scheme!r}: use postgresql:// or sqlite:///"
    )


def _seconds_or_never(value: str) -> float | None:
    """A number of seconds, or ``none`` / ``never`` (``None``)."""
    if value.strip().lower() in ("none", "never"):
        return None
    return float(value)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float | None:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or plain seconds; ``none``/``never``: ``None``.

    Raises:
        ValueError: anything else, or a negative duration.
    """
    value = text.strip().lower()
    if value in ("none", "never"):
        return None
    unit = _UNITS.get(value[-1:], 0)
    number = float(value[:-1] if unit else value) * (unit or 1)
    if not (0 <= number < float("inf")):
        raise ValueError(f"not a duration: {text!r}")
    return number


def _retention_values(env: Mapping[str, str]) -> dict[str, object]:
    """``HELIX_RETENTION`` (a duration), ``HELIX_RETENTION_BY_AGENT`` (``agent=duration,...``)
    and ``HELIX_RETENTION_SWEEP_SECONDS``.

    Raises:
        ConfigError: a value that is not a duration, or an entry without ``=``.
    """
    values: dict[str, object] = {}
    try:
        if env.get("HELIX_RETENTION"):
            values["retention_seconds"] = parse_duration(env["HELIX_RETENTION"])
        if env.get("HELIX_RETENTION_BY_AGENT"):
            by: dict[str, float | None] = {}
            for entry in env["HELIX_RETENTION_BY_AGENT"].split(","):
                if entry.strip():
                    agent, eq, duration = entry.partition("=")
                    if not eq or not agent.strip():
                        raise ValueError(f"{entry.strip()!r} is not agent=duration")
                    by[agent.strip()] = parse_duration(duration)
            values["retention_by_agent"] = by
        if env.get("HELIX_RETENTION_SWEEP_SECONDS"):
            values["retention_sweep_seconds"] = float(env["HELIX_RETENTION_SWEEP_SECONDS"])
    except ValueError as exc:
        raise ConfigError(f"A HELIX_RETENTION* value is not a duration: {exc}") from None
    return values


def _check_retention(values: list[float | None]) -> None:
    if any(v is not None and not (0 <= v < float("inf")) for v in values):
        raise ConfigError("a retention must be a finite number of seconds >= 0, or None")


def _env_bool(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


#: The text settings of ``HelixSettings.from_env``: variable -> field.
_TEXT_VARS = {
    "HELIX_DATABASE_URL": "database_url",
    "HELIX_APP_NAME": "app_name",
    "HELIX_EXECUTOR_ID": "executor_id",
    "HELIX_APP_VERSION": "application_version",
    "DBOS_LOG_LEVEL": "dbos_log_level",
}

#: The numeric settings of ``HelixSettings.from_env``: variable -> (field, parser).
_NUMBER_VARS: dict[str, tuple[str, Callable[[str], object]]] = {
    "HELIX_MAX_RESULT_BYTES": ("max_result_bytes", int),
    "HELIX_STORE_MAX_STATE_BYTES": ("store_max_state_bytes", int),
    "HELIX_MAX_EXECUTOR_THREADS": ("max_executor_threads", int),
    "HELIX_HEARTBEAT_SECONDS": ("heartbeat_seconds", float),
    "HELIX_ADOPT_AFTER_SECONDS": ("adopt_after_seconds", float),
    "HELIX_SQLITE_POLL_SECONDS": ("sqlite_poll_seconds", float),
    "HELIX_HEAL_INTERVAL_SECONDS": ("heal_interval_seconds", float),
    "HELIX_HEAL_GRACE_SECONDS": ("heal_grace_seconds", float),
    "HELIX_HIBERNATE_AFTER_SECONDS": ("hibernate_after_seconds", _seconds_or_never),
    "HELIX_DEADLINE_KEEPER_SECONDS": ("deadline_keeper_seconds", float),
    "HELIX_DECISION_RETENTION_DAYS": ("decision_retention_days", float),
}


def _text_values(env: Mapping[str, str]) -> dict[str, object]:
    """The text settings ``env`` sets (an empty variable sets nothing), by field."""
    return {name: env[var] for var, name in _TEXT_VARS.items() if env.get(var)}


def _number_values(env: Mapping[str, str]) -> dict[str, object]:
    """The numeric settings ``env`` sets (an empty variable sets nothing), by field.

    Raises:
        ConfigError: a variable that does not parse as its number.
    """
    values: dict[str, object] = {}
    for var, (name, parse) in _NUMBER_VARS.items():
        if not env.get(var):
            continue
        try:
            values[name] = parse(env[var].strip())
        except ValueError:
            kind = "a whole number" if parse is int else "a number of seconds"
            if parse is _seconds_or_never:
                kind += " or never"
            raise ConfigError(
                f"{var}={env[var]!r} is not {kind}", variable=var, value=env[var]
            ) from None
    return values


@dataclass(frozen=True)
class HelixSettings:
    """Everything the runtime is configured with. Build it directly or with ``from_env``."""

    database_url: str = DEFAULT_SQLITE_URL
    app_name: str = "helix-dbos"
    executor_id: str = ""
    """Empty: a generated id (:func:`generate_executor_id`), fixed for this settings object."""
    application_version: str = ""
    """Empty: the durable contract's ``CONTRACT_VERSION``."""
    forward_versions: frozenset[str] | None = None
    """``None``: the contract's ``REPLAYABLE_VERSIONS``."""
    heartbeat_seconds: float = 3.0
    adopt_after_seconds: float = 15.0
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    store_max_state_bytes: int | None = None
    run_migrations: bool = True
    max_executor_threads: int = 64
    sqlite_poll_seconds: float = 0.05
    dbos_log_level: str = "WARNING"
    heal_interval_seconds: float = 10.0
    """How often the runtime's reconciler runs (``0``: never; ``helix-dbos heal`` still does)."""
    heal_grace_seconds: float = 15.0
    """How long a session must be untouched before the reconciler judges it."""
    hibernate_after_seconds: float | None = 60.0
    """A parked turn's hot window when its agent sets none: seconds its workflow waits live
    before the turn hibernates (``0``: at once; ``None``: never). ``define_agent``'s
    ``hibernate_after`` wins."""
    deadline_keeper_seconds: float = 1.0
    """How often the deadline keeper looks for hibernated batches that are due (``0``: never)."""
    decision_retention_days: float | None = None
    """How long the approval decision record is kept, in days: the retention sweeper, ``prune``
    and ``approvals --purge-decided`` delete older decisions, never one whose approval still
    waits (``None``: for ever)."""
    retention_seconds: float | None = None
    """How long an ended session tree is kept after its last write before the retention
    sweeper deletes it, when its agent has no retention of its own (``None``: for ever, the
    default: nothing is deleted unless the operator says so)."""
    retention_by_agent: Mapping[str, float | None] = field(default_factory=dict)
    """Per agent type: its sessions' retention (``None``: for ever), over the default."""
    retention_sweep_seconds: float = 60.0
    """How often the runtime's retention sweeper runs, when a retention is set (``0``: never;
    ``helix-dbos prune`` still does)."""
    extra_dbos_config: Mapping[str, object] = field(default_factory=dict)

    def _check_periods(self) -> None:
        if self.deadline_keeper_seconds < 0:
            raise ConfigError("deadline_keeper_seconds must be >= 0")
        if self.decision_retention_days is not None and not self.decision_retention_days > 0:
            raise ConfigError("decision_retention_days must be > 0")

    def __post_init__(self) -> None:
        parse_database_url(self.database_url)
        level = str(self.dbos_log_level).strip().upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ConfigError(
                f"DBOS_LOG_LEVEL={self.dbos_log_level!r} is not a log level: use debug, info, "
                "warning or error"
            )
        # DBOS hands the name to logging, which knows only upper-case names.
        object.__setattr__(self, "dbos_log_level", level)
        if not self.executor_id:
            object.__setattr__(self, "executor_id", generate_executor_id())
        if not self.application_version or self.forward_versions is None:
            if not self.application_version:
                object.__setattr__(self, "application_version", CONTRACT_VERSION)
            if self.forward_versions is None:
                object.__setattr__(self, "forward_versions", REPLAYABLE_VERSIONS)
        if self.heartbeat_seconds <= 0 or self.adopt_after_seconds < 2 * self.heartbeat_seconds:
            raise ConfigError(
                "heartbeat_seconds must be > 0 and adopt_after_seconds at least twice it "
                f"(got {self.heartbeat_seconds} and {self.adopt_after_seconds})"
            )
        if self.max_result_bytes <= 0:
            raise ConfigError("max_result_bytes must be > 0")
        window = self.hibernate_after_seconds
        if window is not None and not (0 <= window < float("inf")):
            raise ConfigError(
                f"hibernate_after_seconds must be a finite number >= 0 or None (got {window})"
            )
        self._check_periods()
        _check_retention([self.retention_seconds, *self.retention_by_agent.values()])
        if (
            self.store_max_state_bytes is not None
            and self.max_result_bytes > self.store_max_state_bytes
        ):
            # A result over the store's limit could never be stored: refuse the runtime.
            raise ConfigError(
                f"max_result_bytes ({self.max_result_bytes}) is larger than the store's "
                f"limit ({self.store_max_state_bytes})",
                limitBytes=self.store_max_state_bytes,
            )

    @property
    def urls(self) -> DatabaseUrls:
        """The database URL mapped to each driver."""
        return parse_database_url(self.database_url)

    def with_(self, **changes: object) -> HelixSettings:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> HelixSettings:
        """Settings from ``HELIX_*`` variables; keyword overrides win."""
        env = os.environ if environ is None else environ
        values = _text_values(env)
        values.update(_number_values(env))
        if env.get("HELIX_FORWARD_VERSIONS"):
            values["forward_versions"] = frozenset(
                v.strip() for v in env["HELIX_FORWARD_VERSIONS"].split(",") if v.strip()
            )
        values.update(_retention_values(env))
        if env.get("HELIX_RUN_MIGRATIONS"):
            values["run_migrations"] = _env_bool(env["HELIX_RUN_MIGRATIONS"])
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    def sqlite_path(self) -> Path | None:
        """The SQLite file, for the embedded backend."""
        urls = self.urls
        return Path(urls.user.removeprefix("sqlite:///")) if urls.is_sqlite else None
