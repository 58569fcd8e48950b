"""A turn's first model step, started as its entry commits, before its workflow runs.

The entry of a new turn (``_commits/opening.py``) hands the step to the turn (``handover``): the same
code under the same checkpoint slot as the turn's own first step, so whichever runs it, the
model is called and its answer committed once.
"""

from __future__ import annotations

from ...store import patience
from .. import names
from .._commits.once import CommitContext
from .._handover import EntryInputs, FirstStep, detached
from ..records import FencedResult, ModelStepResult
from .outcomes import new_summary
from .steps import model_answer

__all__ = ["start_first_step"]


def start_first_step(
    workflow_id: str,
    session_id: str,
    turn_id: str,
    agent_type: str,
    root_session_id: str,
    entry: EntryInputs,
) -> FirstStep | EntryInputs:
    """Start the first model step of a turn from its committed ``entry``, before its
    workflow runs (``handover``): the step ``_Turn`` would run first, under its
    checkpoint slot, waiting out database faults as the turn does.

    A process recording layout 1 (contract-1, as tests simulate it) ran the step as a DBOS
    step inside its workflow: there ``entry`` is handed over as it is.
    """
    if names.TURN_LAYOUT < 2:
        return entry

    async def first_step() -> ModelStepResult | FencedResult:
        with patience(None):
            return await model_answer(
                CommitContext(names.turn_slot(workflow_id, turn_id, 0, "model"), inputs=entry),
                session_id,
                root_session_id,
                turn_id,
                agent_type,
                0,
                new_summary(),
            )

    return detached(first_step())  # nobody takes it if the start failed
