"""The recorded shapes are a contract: pin every key, so a change is a conscious, noted one.

A turn parked by one release replays on the next one from the values its steps recorded. A key
renamed, removed, retyped or made required here strands it; such a change needs a
compatibility path, a CHANGELOG.md entry and a new ``names.CONTRACT_VERSION``.
"""

from __future__ import annotations

import re
from typing import Any, get_args, get_type_hints

import pytest

from helix_dbos.runtime import _triage as plan
from helix_dbos.runtime import names, records
from helix_dbos.runtime._commits import once


def shape(typed: Any) -> dict[str, str]:
    """``key -> "required" | "optional"`` of a TypedDict."""
    return {
        **{key: "required" for key in typed.__required_keys__},
        **{key: "optional" for key in typed.__optional_keys__},
    }


#: Every recorded TypedDict and its keys. Extend it (with an optional key) when a step records
#: more; never edit an existing line without a migration story.
PINNED: dict[Any, dict[str, str]] = {
    records.CheckpointState: {"result": "required"},
    records.FencedResult: {"fenced": "required"},
    records.ToolCallRef: {"toolCallId": "required", "toolName": "required"},
    records.PlanItem: {
        "toolCallId": "required",
        "toolName": "required",
        "input": "required",
        "index": "required",
        "kind": "required",
        "error": "optional",
        "asks": "optional",
        "subagent": "optional",
        "timeoutSeconds": "optional",
        "onTimeout": "optional",
        "remindBefore": "optional",
        "approvalPolicy": "optional",
    },
    records.ModelStepResult: {
        "response": "required",
        "llm": "required",
        "plan": "required",
        "deadlines": "required",
    },
    records.ServerToolResult: {
        "ok": "required",
        "result": "optional",
        "error": "optional",
        "errorCode": "optional",
        "asks": "optional",
    },
    records.ToolResult: {
        "toolCallId": "required",
        "toolName": "required",
        "ok": "required",
        "result": "optional",
        "error": "optional",
        "errorCode": "optional",
        "suspended": "optional",
        "outcome": "optional",
        "waitMs": "optional",
        "deadlineAt": "optional",
        "runInput": "optional",
        "onTimeout": "optional",
        "decidedBy": "optional",
    },
    records.CollectedAnswers: {"answers": "required", "abandon": "required"},
    records.CommittedResults: {"results": "required", "stashedMessage": "required"},
    records.TurnSummary: {
        "steps": "required",
        "clientCalls": "required",
        "waitMs": "required",
        "inputTokens": "required",
        "outputTokens": "required",
    },
    records.TurnError: {"code": "required", "message": "required", "retryable": "optional"},
    records.TurnOutcome: {
        "outcome": "required",
        "text": "required",
        "output": "required",
        "error": "required",
        "runId": "required",
        "continueAs": "optional",
    },
    records.FinishResult: {"outcome": "required", "summary": "required"},
    records.ChildStarted: {"sessionId": "required"},
    records.LifecycleApplied: {
        "ended": "required",
        "committed": "required",
        "agentType": "required",
    },
    records.LifecycleRefused: {"outcome": "required", "error": "required"},
    records.RepairRecord: {
        "sessionId": "required",
        "workflowId": "required",
        "workflowStatus": "required",
        "action": "required",
    },
    records.TurnMessage: {"kind": "required", "toolCallId": "optional", "submittedAt": "optional"},
    records.EntryStash: {"message": "required", "abandonPending": "required", "runId": "required"},
    records.PersistentMark: {"workflowId": "required", "since": "required"},
    records.InboxMessage: {"kind": "required", "runId": "required"},
    records.PersistentOutcome: {"turns": "required", "ended": "required", "lastRunId": "required"},
    records.HibernationMark: {
        "at": "required",
        "workflowId": "required",
        "step": "required",
        "dueAt": "required",
        "child": "optional",
    },
    records.HibernationRecord: {
        "hibernated": "required",
        "childOutcome": "optional",
        "child": "optional",
        "step": "optional",
        "plan": "optional",
        "results": "optional",
        "summary": "optional",
    },
}


@pytest.mark.parametrize("typed", list(PINNED), ids=lambda t: t.__name__)
def test_recorded_shapes_are_pinned(typed: Any) -> None:
    """Each recorded value keeps its keys, and which of them are required."""
    assert shape(typed) == PINNED[typed]
    get_type_hints(typed)  # every annotation resolves (no stale forward reference)


def test_every_recorded_shape_is_pinned() -> None:
    """A TypedDict added to records.py is added to PINNED too."""
    exported = {
        getattr(records, name)
        for name in records.__all__
        if isinstance(getattr(records, name), type)
        and hasattr(getattr(records, name), "__required_keys__")
    }
    assert exported == set(PINNED)


def test_kinds_and_keys_are_pinned() -> None:
    """Checkpoint slot kinds, plan kinds, message kinds and the stash key never change."""
    assert records.CHECKPOINT_KINDS == (
        "model",
        "results",
        "finish",
        "start_child",
        "lifecycle",
        "hibernate",
        "await_child",
        "companion_reply",
        "asks",
    )
    assert get_args(records.CheckpointKind) == records.CHECKPOINT_KINDS
    assert records.PLAN_KINDS == (
        "server",
        "client",
        "approval",
        "subagent",
        "companion",
        "invalid",
    )
    assert get_args(records.PlanKind) == records.PLAN_KINDS
    assert set(plan.SUSPENDING_KINDS) < set(records.PLAN_KINDS)
    assert records.MESSAGE_KINDS == ("answer", "stop", "abandon")
    assert get_args(records.MessageKind) == records.MESSAGE_KINDS
    assert records.STASH_KEY == "entryInput"
    assert records.FENCED_KEY == once.FENCED == "fenced"
    assert get_args(get_type_hints(records.TurnOutcome)["outcome"]) == (
        "completed",
        "failed",
        "stopped",
        "hibernated",
    )
    assert records.HIBERNATED_KEY == "hibernated"
    assert records.WokenAnswers == dict[str, int]
    assert records.PERSISTENT_KEY == "persistent"
    assert records.HIBERNATE_ACTIONS == ("continue", "hibernated", "released")
    assert get_args(records.HibernateAction) == records.HIBERNATE_ACTIONS
    assert records.COMPANIONS_KEY == "companions"
    assert records.COMPANION_NOTICES_KEY == "companionNotices"
    assert records.COMPANION_ENDED_KEY == "companionEnded"


def test_id_formats_are_pinned() -> None:
    """Session ids ``ses_<32 hex>``, run ids ``run_<24 hex>``, sub-agent runs ``run_<call>``."""
    assert re.fullmatch(r"ses_[0-9a-f]{32}", records.new_session_id())
    assert re.fullmatch(r"run_[0-9a-f]{24}", records.new_run_id())
    assert records.new_run_id() != records.new_run_id()
    assert records.child_run_id("call_1") == "run_call_1"


def test_contract_version() -> None:
    """The contract's version; a bump is a CHANGELOG.md entry."""
    assert names.CONTRACT_VERSION == "contract-3"
    assert sorted(names.REPLAYABLE_VERSIONS) == ["0.1.0", "contract-1", "contract-2"]
    assert names.TURN_LAYOUT == 3


def test_the_recorded_values_have_the_pinned_shapes() -> None:
    """What the code builds matches the TypedDicts: a plan item, a resolved answer, a fenced
    result, an answer's wake-up and a reconciler repair, key for key."""
    from helix_dbos.core.messages import ToolCall
    from helix_dbos.runtime._operations.heal import Repair
    from helix_dbos.runtime._submit.answer import _answer_message
    from helix_dbos.runtime._turn.resolve import resolve_call

    from .agents import editor_agent

    call = ToolCall(id="call_1", name="edit", input={"text": "x"})
    [item] = plan.plan_calls(editor_agent(), [call])
    assert set(item) == {"toolCallId", "toolName", "input", "index", "kind", "timeoutSeconds"}
    assert set(item) <= set(shape(records.PlanItem))
    entry = {"deadlineAt": 2, "registeredAt": 1, "submittedAt": None, "kind": "client"}
    resolved = resolve_call(item, entry, abandon=False)
    assert set(resolved) <= set(shape(records.ToolResult))
    assert set(_answer_message("call_1", 5)) == set(shape(records.TurnMessage))
    repair = Repair("s", "wf", "PENDING", "rewoken").dump()
    assert set(repair) == set(shape(records.RepairRecord))
