"""``TurnHandle``: what an entry (start or resume) returns, and the wait for its turn's end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._hibernated.continuation import follow

__all__ = ["TurnHandle"]


@dataclass(frozen=True)
class TurnHandle:
    """What an entry (start or resume) returns."""

    session_id: str
    run_id: str
    workflow_id: str | None = None
    workflow: Any = field(default=None, compare=False, repr=False)
    """In-process DBOS handle of the started turn, when this process started it; for a
    persistent session, a ``persistent.TurnResult`` (its workflow outlives the turn)."""
    delivery: str | None = None
    """A persistent session only: ``started`` (a new workflow runs the turn) or
    ``delivered`` (the session's live workflow took it from its inbox)."""

    async def result(self) -> Any:
        """Wait for the turn to end; returns its outcome (the turn workflow's result, or its
        continuation's if it hibernated; for a persistent session, the outcome its workflow
        published for this turn)."""
        if self.workflow is None:
            raise RuntimeError("This handle did not start a workflow in this process")
        # A turn that hibernated ends in its continuation's workflow.
        return await follow(self.session_id, await self.workflow.get_result())

    def dump(self) -> dict[str, Any]:
        """The wire form ``{sessionId, runId}`` (and ``delivery`` for a persistent session)."""
        out: dict[str, Any] = {"sessionId": self.session_id, "runId": self.run_id}
        if self.delivery is not None:
            out["delivery"] = self.delivery
        return out
