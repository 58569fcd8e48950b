"""What a launched runtime is: the facts of its ``runtime.started`` log line.

``AgentRuntime.launch`` gathers them once (``AgentRuntime.startup``) and logs them as one
event, so an operator reads in one line which database (password masked), which agents, which
authentication, which schema revision, which executor and versions, how many parked turns
this launch recovered (this executor's, through DBOS) and how many the fleet's first sweep
adopted (dead executors'). Later adoptions log ``fleet.adopted`` when they happen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..._version import __version__
from ...config import HelixSettings, redact_url
from ...core.agents import AgentRegistry
from ...observability.log import log_event
from ...store import SessionStore

__all__ = ["StartupFacts", "count_recoverable", "log_started", "startup_facts"]


@dataclass(frozen=True)
class StartupFacts:
    """One launch of a runtime, as its ``runtime.started`` line reports it."""

    database: str
    """The database URL, its password replaced by ``***``."""
    agents: tuple[str, ...]
    """The agents served, by name (sub-agents included)."""
    migration_revision: str
    """The revision of the helix-dbos tables (the Alembic head this release needs)."""
    executor_id: str
    application_version: str
    """The workflow contract's version: which parked turns this process may replay."""
    version: str
    """The helix-dbos package's version."""
    recovered: int
    """PENDING workflows of this executor and version that DBOS recovered at this launch
    (parked turns, and persistent sessions' workflows)."""
    adopted: int | None
    """Turns of dead executors the fleet's first sweep took over; ``None`` when that sweep
    failed or took longer than a heartbeat (its adoptions still log ``fleet.adopted``)."""
    extra: tuple[tuple[str, Any], ...] = ()
    """More fields a host added (``AgentRuntime.startup_fields``; the HTTP server adds
    ``auth``)."""

    def dump(self) -> dict[str, Any]:
        """The fields of the log line (camelCase, as every event's)."""
        return {
            "database": self.database,
            "agents": list(self.agents),
            **dict(self.extra),
            "migrationRevision": self.migration_revision,
            "executorId": self.executor_id,
            "applicationVersion": self.application_version,
            "version": self.version,
            "recovered": self.recovered,
            "adopted": self.adopted,
        }


async def count_recoverable(store: SessionStore, settings: HelixSettings, schema: str) -> int:
    """How many workflows DBOS's launch is about to recover: its own query (PENDING, this
    executor id, this application version, this application or none), read just before it.

    ``0`` on a database where DBOS has not created its tables yet (a first launch).
    """
    return await store.dbos.count_recoverable(
        schema, settings.executor_id, settings.application_version, settings.app_name
    )


def startup_facts(
    settings: HelixSettings,
    registry: AgentRegistry,
    revision: str,
    recovered: int,
    adopted: int | None,
    extra: dict[str, Any] | None = None,
) -> StartupFacts:
    """The facts of one launch (``extra``: the host's fields, e.g. ``auth``)."""
    return StartupFacts(
        database=redact_url(settings.database_url),
        agents=tuple(agent.name for agent in registry),
        migration_revision=revision,
        executor_id=settings.executor_id,
        application_version=settings.application_version,
        version=__version__,
        recovered=recovered,
        adopted=adopted,
        extra=tuple((extra or {}).items()),
    )


def log_started(facts: StartupFacts) -> None:
    """Log ``runtime.started`` (INFO) with the facts."""
    log_event("runtime.started", **facts.dump())
