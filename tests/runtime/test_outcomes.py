"""A turn's outcomes and results as values (``runtime/_turn/outcomes.py``)."""

from __future__ import annotations

import pytest

from helix_dbos.runtime._commits.once import FENCED
from helix_dbos.runtime._turn.outcomes import (
    Stopped,
    check_fence,
    completed,
    ids,
    new_summary,
    outcome_of,
    stopped_outcome,
)


def test_a_fenced_step_ends_the_turn_and_any_other_result_passes() -> None:
    with pytest.raises(Stopped):
        check_fence({FENCED: "superseded"})
    assert check_fence({"results": []}) == {"results": []}
    assert check_fence(None) is None  # a step recorded by 0.1 may have returned None


def test_a_calls_result_is_completed_by_what_its_tool_returned() -> None:
    item = {"toolCallId": "t1", "toolName": "edit", "input": {"text": "x"}, "kind": "server"}
    ref = ids(item)  # type: ignore[arg-type]
    assert ref == {"toolCallId": "t1", "toolName": "edit"}
    assert completed(ref, {"ok": True, "result": 3}) == {
        "toolCallId": "t1",
        "toolName": "edit",
        "ok": True,
        "result": 3,
    }


def test_outcomes_and_totals() -> None:
    assert stopped_outcome("r1") == {
        "outcome": "stopped",
        "text": "",
        "output": None,
        "error": None,
        "runId": "r1",
    }
    assert outcome_of("completed", "hi", {"a": 1}, None, "r2")["output"] == {"a": 1}
    assert new_summary() == {
        "steps": 0,
        "clientCalls": 0,
        "waitMs": 0,
        "inputTokens": 0,
        "outputTokens": 0,
    }
