"""Live Prometheus metrics of the waits for humans and clients (``GET /metrics``).

Two kinds of figures, in a registry of the runtime's own:

* counted as they happen, in this process: how each wait ended (a histogram of its length
  by tool and outcome), expiries, submits by their answer, turns by their outcome. Like every
  Prometheus counter they start at zero with the process; a fleet is scraped process by
  process and summed.
* read from the database when scraped (``set_pending``): the pending approvals and client
  calls by tool, and the age of the oldest pending approval. These are the database's
  figures, the same whichever process of a fleet is scraped.

Labels are the tool's name and an outcome or answer from a fixed set, never a session or a
call: the number of series stays bounded by the agents' tools.

Recording goes through the module's functions (``record_outcome``, ``record_submit``,
``record_turn``), which feed the metrics of the launched runtime (``activate``); with none
active they do nothing. DBOS runs one launched runtime per process, so one is active at a
time, while each runtime keeps its own registry (two runtimes of one process never share
series). Callers record only after their writes committed, and never on a replay: a
recovered turn does not count its past waits again in the new process.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ..core.expiry import wait_outcome
from ..core.session import SubmitAnswer
from ..errors import HelixError

__all__ = [
    "CONTENT_TYPE",
    "WAIT_BUCKETS",
    "WAIT_OUTCOMES",
    "ApprovalMetrics",
    "PendingFigures",
    "activate",
    "active",
    "deactivate",
    "record_answer",
    "record_outcome",
    "record_refusal",
    "record_results",
    "record_submit",
    "record_turn",
    "wait_outcome",
]

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
"""The media type of ``exposition()``'s text."""

#: How a wait ended, as the histogram's ``outcome`` label says it.
WAIT_OUTCOMES: Final = ("answered", "denied", "expired", "abandoned", "stopped")

#: Waits last from a browser's second to a human's days: 1 s to 7 days.
WAIT_BUCKETS: Final = (
    1.0,
    5.0,
    15.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    4 * 3600.0,
    24 * 3600.0,
    3 * 24 * 3600.0,
    7 * 24 * 3600.0,
)


@dataclass(frozen=True, slots=True)
class PendingFigures:
    """What waits now, as the database holds it (``store.pending_figures``)."""

    approvals: dict[str, int]
    """Pending approvals by tool."""
    client_calls: dict[str, int]
    """Pending client calls by tool."""
    oldest_approval_at: int | None
    """When the oldest pending approval was parked (epoch ms); ``None`` when none waits."""


class ApprovalMetrics:
    """The collectors of one runtime, in a ``CollectorRegistry`` of its own.

    Args:
        registry: where to register them (default: a new registry). Pass
            ``prometheus_client.REGISTRY`` to expose them with the process's default metrics.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.pending_approvals = Gauge(
            "helix_pending_approvals",
            "Approvals waiting for a human now, by tool (read from the database when scraped).",
            ["tool"],
            registry=reg,
        )
        self.pending_client_calls = Gauge(
            "helix_pending_client_calls",
            "Client tool calls waiting for their result now, by tool (read when scraped).",
            ["tool"],
            registry=reg,
        )
        self.oldest_approval_age = Gauge(
            "helix_oldest_pending_approval_age_seconds",
            "How long the oldest pending approval has waited (0 when none waits).",
            registry=reg,
        )
        self.waits = Histogram(
            "helix_tool_wait_seconds",
            "How long a call waited for its human or client, by tool and how the wait ended "
            "(answered, denied, expired, abandoned, stopped).",
            ["tool", "outcome"],
            buckets=WAIT_BUCKETS,
            registry=reg,
        )
        self.expiries = Counter(
            "helix_tool_expiries",
            "Calls whose deadline lapsed without an answer, by tool.",
            ["tool"],
            registry=reg,
        )
        self.submits = Counter(
            "helix_submits",
            "Submitted answers by tool and what the submit answered: the continuation of an "
            "accepted answer, already_completed, unknown_tool_call (or its reason), or the "
            "error code of a refusal.",
            ["tool", "answer"],
            registry=reg,
        )
        self.turns = Counter(
            "helix_turns",
            "Turns ended, by outcome (completed, failed, interrupted).",
            ["outcome"],
            registry=reg,
        )

    def observe_wait(self, tool: str, outcome: str, wait_ms: int) -> None:
        """One wait ended: its length, and an expiry if it lapsed."""
        self.waits.labels(tool=tool, outcome=outcome).observe(max(0, wait_ms) / 1000)
        if outcome == "expired":
            self.expiries.labels(tool=tool).inc()

    def count_submit(self, tool: str, answer: str) -> None:
        """One submit answered ``answer``."""
        self.submits.labels(tool=tool, answer=answer).inc()

    def count_turn(self, outcome: str) -> None:
        """One turn ended with ``outcome``."""
        self.turns.labels(outcome=outcome).inc()

    def set_pending(
        self,
        figures: PendingFigures,
        now_ms: int,
        tools: Mapping[str, str] | None = None,
    ) -> None:
        """Set the gauges from the database's figures.

        ``tools``: name -> kind (``approval`` or ``client``) of the tools the runtime's agents
        define; each is shown, at 0 when nothing of it waits, so its series never vanish.
        """
        known = tools or {}
        approvals = {name: 0 for name, kind in known.items() if kind == "approval"}
        clients = {name: 0 for name, kind in known.items() if kind == "client"}
        approvals.update(figures.approvals)
        clients.update(figures.client_calls)
        oldest = figures.oldest_approval_at
        # Tools no longer seen lose their series (clear), the rest are set: no await between,
        # so a concurrent scrape never sees a half-set family.
        self.pending_approvals.clear()
        self.pending_client_calls.clear()
        for name, count in approvals.items():
            self.pending_approvals.labels(tool=name).set(count)
        for name, count in clients.items():
            self.pending_client_calls.labels(tool=name).set(count)
        self.oldest_approval_age.set(0 if oldest is None else max(0, now_ms - oldest) / 1000)

    def exposition(self) -> bytes:
        """The registry in Prometheus's text format (``CONTENT_TYPE``)."""
        return generate_latest(self.registry)


_active: ApprovalMetrics | None = None


def activate(metrics: ApprovalMetrics) -> None:
    """Make ``metrics`` the one this process records into (a runtime's launch)."""
    global _active
    _active = metrics


def deactivate(metrics: ApprovalMetrics) -> None:
    """Stop recording into ``metrics`` (a runtime's shutdown); another's stays active."""
    global _active
    if _active is metrics:
        _active = None


def active() -> ApprovalMetrics | None:
    """The metrics this process records into, if a runtime is launched."""
    return _active


def record_outcome(tool: str, outcome: str, wait_ms: int) -> None:
    """Record how one wait ended (``WAIT_OUTCOMES``), after its result committed."""
    if _active is not None:
        _active.observe_wait(tool, outcome, wait_ms)


def record_results(results: Iterable[Mapping[str, Any]]) -> None:
    """Record the waits of a batch's committed results (``steps.commit_results``)."""
    for result in results:
        outcome = wait_outcome(result)
        if outcome is not None:
            record_outcome(str(result.get("toolName", "")), outcome, int(result.get("waitMs", 0)))


def record_submit(tool: str, answer: str) -> None:
    """Record one submit's answer."""
    if _active is not None:
        _active.count_submit(tool, answer)


def record_answer(tool: str, answer: SubmitAnswer) -> None:
    """Record a submit by what it answered: an accepted answer's continuation, else the
    reason of ``unknown_tool_call`` (``run_stopped``, ``deadline_lapsed``) or the status."""
    if answer.status == "accepted" and answer.continuation is not None:
        record_submit(tool, answer.continuation.kind)
    else:
        record_submit(tool, answer.reason or answer.status)


def record_refusal(exc: HelixError) -> None:
    """Record a refused submit by its error code (its tool when the refusal names one)."""
    record_submit(str(exc.details.get("toolName") or ""), str(exc.code))


def record_turn(outcome: str) -> None:
    """Record one turn's end."""
    if _active is not None:
        _active.count_turn(outcome)
