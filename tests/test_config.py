"""Settings: the database URL forms users paste, HELIX_* variables, and refused combinations."""

from __future__ import annotations

import os
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

import helix_dbos
from helix_dbos.config import (
    DEFAULT_MAX_RESULT_BYTES,
    HelixSettings,
    parse_database_url,
    redact_url,
)
from helix_dbos.errors import ConfigError
from helix_dbos.runtime import names

# -- database URLs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://alice:pw@db.internal:5432/app",
        "postgres://alice:pw@db.internal:5432/app",
        "postgresql+psycopg://alice:pw@db.internal:5432/app",
        "POSTGRESQL://alice:pw@db.internal:5432/app",
        "  postgresql://alice:pw@db.internal:5432/app\n",
    ],
)
def test_postgres_forms_map_to_psycopg(url: str) -> None:
    """Every Postgres spelling maps to psycopg 3 for SQLAlchemy and plain postgresql:// for DBOS."""
    urls = parse_database_url(url)
    assert urls.dialect == "postgresql"
    assert not urls.is_sqlite
    # A URL that sets no connect timeout gets one (core/pg_url.py).
    assert urls.user == "postgresql://alice:pw@db.internal:5432/app?connect_timeout=5"
    assert urls.sync == "postgresql+psycopg://alice:pw@db.internal:5432/app?connect_timeout=5"
    assert urls.async_ == "postgresql+psycopg://alice:pw@db.internal:5432/app?connect_timeout=5"
    assert urls.dbos == "postgresql://alice:pw@db.internal:5432/app?connect_timeout=5"


def test_postgres_query_string_is_kept() -> None:
    """Connection options such as sslmode survive the mapping."""
    urls = parse_database_url("postgres://h/app?sslmode=require&application_name=x")
    query = "sslmode=require&application_name=x&connect_timeout=5"
    assert urls.sync == f"postgresql+psycopg://h/app?{query}"
    assert urls.dbos == f"postgresql://h/app?{query}"


def test_sqlite_relative_path() -> None:
    """sqlite:///rel is a path relative to the working directory; async uses aiosqlite."""
    urls = parse_database_url("sqlite:///data/helix.sqlite")
    assert urls.dialect == "sqlite"
    assert urls.is_sqlite
    assert urls.sync == urls.dbos == urls.user == "sqlite:///data/helix.sqlite"
    assert urls.async_ == "sqlite+aiosqlite:///data/helix.sqlite"
    settings = HelixSettings(database_url="sqlite:///data/helix.sqlite")
    assert settings.sqlite_path() == Path("data/helix.sqlite")


def test_sqlite_absolute_path() -> None:
    """sqlite:////abs keeps the leading slash of an absolute path."""
    urls = parse_database_url("sqlite:////var/lib/helix/helix.sqlite")
    assert urls.sync == "sqlite:////var/lib/helix/helix.sqlite"
    assert urls.async_ == "sqlite+aiosqlite:////var/lib/helix/helix.sqlite"
    settings = HelixSettings(database_url="sqlite:////var/lib/helix/helix.sqlite")
    assert settings.sqlite_path() == Path("/var/lib/helix/helix.sqlite")
    assert HelixSettings(database_url="postgresql://h/app").sqlite_path() is None


@pytest.mark.parametrize(
    "url",
    [
        "mysql://h/app",
        "postgresql+asyncpg://h/app",
        "https://example.invalid/app",
        "not a url",
        "",
        "postgresql://h",
        "postgresql://h/",
        "sqlite://",
        "sqlite:///",
        "sqlite://relative.sqlite",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    """Unsupported schemes and URLs without a database raise ConfigError."""
    with pytest.raises(ConfigError) as info:
        parse_database_url(url)
    assert info.value.code == "config_error"


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite+aiosqlite:///:memory:"])
def test_in_memory_sqlite_is_refused(url: str) -> None:
    """An in-memory database cannot be shared by our engine and DBOS's, so it is refused."""
    with pytest.raises(ConfigError, match="in-memory"):
        parse_database_url(url)
    with pytest.raises(ConfigError):
        HelixSettings(database_url=url)


@pytest.mark.parametrize("url", ["postgresql://alice:s3cret-pw@h", "mysql://alice:s3cret-pw@h/app"])
def test_refusals_do_not_leak_the_password(url: str) -> None:
    """The error names the URL without its password (it ends up in logs and on stderr)."""
    with pytest.raises(ConfigError) as info:
        parse_database_url(url)
    assert "s3cret-pw" not in str(info.value)
    assert "s3cret-pw" not in repr(info.value.to_body())


# -- settings -------------------------------------------------------------------------------


def test_defaults() -> None:
    """The defaults: embedded SQLite, the contract's version (not the package's), a generated
    executor id unique per settings object, a 1 MB result limit, migrations on."""
    s = HelixSettings()
    assert s.database_url == "sqlite:///helix.sqlite"
    assert s.urls.is_sqlite
    assert s.application_version == names.CONTRACT_VERSION != helix_dbos.__version__
    assert helix_dbos.__version__ == version("helix-dbos")
    assert s.forward_versions == names.REPLAYABLE_VERSIONS
    assert s.executor_id and s.executor_id != HelixSettings().executor_id
    assert f"-{os.getpid()}-" in s.executor_id
    assert s.with_(max_result_bytes=5).executor_id == s.executor_id
    assert s.max_result_bytes == DEFAULT_MAX_RESULT_BYTES == 1_000_000
    assert s.store_max_state_bytes is None
    assert s.run_migrations is True


def test_from_env_reads_helix_variables() -> None:
    """Every HELIX_* variable lands in its field, with the right type."""
    env = {
        "HELIX_DATABASE_URL": "postgres://u@db/app",
        "HELIX_APP_NAME": "support-bot",
        "HELIX_EXECUTOR_ID": "worker-7",
        "HELIX_APP_VERSION": "2024.06",
        "HELIX_MAX_RESULT_BYTES": "2048",
        "HELIX_STORE_MAX_STATE_BYTES": "4096",
        "HELIX_RUN_MIGRATIONS": "false",
        "HELIX_MAX_EXECUTOR_THREADS": "8",
        "HELIX_SQLITE_POLL_SECONDS": "0.5",
        "DBOS_LOG_LEVEL": "info",
        "HELIX_FORWARD_VERSIONS": "2024.05, 2024.04",
        "HELIX_HEARTBEAT_SECONDS": "1.5",
        "HELIX_ADOPT_AFTER_SECONDS": "6",
        "UNRELATED": "ignored",
    }
    s = HelixSettings.from_env(env)
    assert s.database_url == "postgres://u@db/app"
    assert s.urls.sync == "postgresql+psycopg://u@db/app?connect_timeout=5"
    assert (s.app_name, s.executor_id, s.application_version) == (
        "support-bot",
        "worker-7",
        "2024.06",
    )
    assert (s.max_result_bytes, s.store_max_state_bytes) == (2048, 4096)
    assert s.run_migrations is False
    assert s.max_executor_threads == 8
    assert s.sqlite_poll_seconds == 0.5
    assert s.dbos_log_level == "INFO"
    assert s.forward_versions == frozenset({"2024.05", "2024.04"})
    assert (s.heartbeat_seconds, s.adopt_after_seconds) == (1.5, 6.0)


def test_from_env_with_nothing_set_is_the_defaults() -> None:
    """Empty variables count as unset (the executor id is generated per settings object)."""
    same: dict[str, Any] = {"executor_id": "x"}
    assert HelixSettings.from_env({}, **same) == HelixSettings(**same)
    assert HelixSettings.from_env({"HELIX_DATABASE_URL": ""}, **same) == HelixSettings(**same)


def test_from_env_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a mapping, os.environ is read; keyword overrides win over it."""
    monkeypatch.setenv("HELIX_DATABASE_URL", "sqlite:///from-env.sqlite")
    monkeypatch.setenv("HELIX_EXECUTOR_ID", "env-executor")
    s = HelixSettings.from_env(executor_id="explicit")
    assert s.database_url == "sqlite:///from-env.sqlite"
    assert s.executor_id == "explicit"


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_run_migrations_truthy(value: str) -> None:
    """The usual spellings of true turn migrations on."""
    assert HelixSettings.from_env({"HELIX_RUN_MIGRATIONS": value}).run_migrations is True


@pytest.mark.parametrize(
    "env",
    [
        {"HELIX_MAX_RESULT_BYTES": "lots"},
        {"HELIX_MAX_EXECUTOR_THREADS": "8.5"},
        {"HELIX_SQLITE_POLL_SECONDS": "soon"},
        {"HELIX_DATABASE_URL": "mysql://h/app"},
        {"HELIX_MAX_RESULT_BYTES": "0"},
    ],
)
def test_bad_env_values_are_refused(env: dict[str, str]) -> None:
    """A malformed variable is a ConfigError naming the problem, not a ValueError."""
    with pytest.raises(ConfigError):
        HelixSettings.from_env(env)


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("HELIX_MAX_RESULT_BYTES", "abc", "HELIX_MAX_RESULT_BYTES='abc' is not a whole number"),
        ("HELIX_MAX_EXECUTOR_THREADS", "8.5", "HELIX_MAX_EXECUTOR_THREADS='8.5' is not a whole"),
        ("HELIX_HEARTBEAT_SECONDS", "soon", "HELIX_HEARTBEAT_SECONDS='soon' is not a number of"),
        ("HELIX_HIBERNATE_AFTER_SECONDS", "x", "HELIX_HIBERNATE_AFTER_SECONDS='x' is not a number"),
    ],
)
def test_a_bad_number_names_its_variable(variable: str, value: str, expected: str) -> None:
    """The refusal of a number that does not parse names the variable and the value given."""
    with pytest.raises(ConfigError) as info:
        HelixSettings.from_env({variable: value})
    assert info.value.message.startswith(expected)
    assert "invalid literal" not in info.value.message
    assert info.value.details == {"variable": variable, "value": value}


def test_result_limit_above_store_limit_is_refused() -> None:
    """A result that the store could never hold is refused at configuration time."""
    with pytest.raises(ConfigError) as info:
        HelixSettings(max_result_bytes=2_000_000, store_max_state_bytes=1_000_000)
    assert info.value.details == {"limitBytes": 1_000_000}
    with pytest.raises(ConfigError):
        HelixSettings.from_env(
            {"HELIX_MAX_RESULT_BYTES": "5000", "HELIX_STORE_MAX_STATE_BYTES": "4999"}
        )
    # Equal limits, or a larger store, are fine.
    assert HelixSettings(max_result_bytes=1000, store_max_state_bytes=1000).max_result_bytes == 1000
    assert HelixSettings(max_result_bytes=10, store_max_state_bytes=None).max_result_bytes == 10


def test_with_returns_a_validated_copy() -> None:
    """with_ changes fields on a copy and validates it again."""
    base = HelixSettings()
    changed = base.with_(executor_id="other")
    assert changed.executor_id == "other" != base.executor_id
    with pytest.raises(ConfigError):
        base.with_(database_url="mysql://h/app")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://alice:pw@db:5432/app", "postgresql://alice:***@db:5432/app"),
        ("postgres://alice@db/app", "postgres://alice@db/app"),
        ("postgresql://db:5432/app", "postgresql://db:5432/app"),
        ("sqlite:////var/lib/helix.sqlite", "sqlite:////var/lib/helix.sqlite"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    """redact_url hides only the password."""
    assert redact_url(url) == shown


def test_retention_variables() -> None:
    """HELIX_RETENTION and HELIX_RETENTION_BY_AGENT take durations; none is the default."""
    assert HelixSettings().retention_seconds is None
    s = HelixSettings.from_env(
        {
            "HELIX_RETENTION": "30d",
            "HELIX_RETENTION_BY_AGENT": "support=12h, audit=never,chat=90",
            "HELIX_RETENTION_SWEEP_SECONDS": "5",
        }
    )
    assert s.retention_seconds == 30 * 86400
    assert dict(s.retention_by_agent) == {"support": 43200.0, "audit": None, "chat": 90.0}
    assert s.retention_sweep_seconds == 5.0
    for bad in ({"HELIX_RETENTION": "soon"}, {"HELIX_RETENTION_BY_AGENT": "support"}):
        with pytest.raises(ConfigError, match="HELIX_RETENTION"):
            HelixSettings.from_env(bad)
    with pytest.raises(ConfigError, match="retention"):
        HelixSettings(retention_seconds=-1)
