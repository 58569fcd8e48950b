"""Durable names are a contract: pin them so a rename is a conscious, migrated change."""

from __future__ import annotations

from helix_dbos.runtime import names


def test_durable_names_are_pinned() -> None:
    """Workflow and step names, and id formats, never change silently."""
    assert names.TURN_WORKFLOW == "helix.turn"
    assert names.MODEL_STEP == "helix.turn.model"
    assert names.SERVER_TOOL_STEP == "helix.turn.server_tool"
    assert names.COMMIT_RESULTS_STEP == "helix.turn.commit_results"
    assert names.FINISH_STEP == "helix.turn.finish"
    assert names.COLLECT_ANSWERS_STEP == "helix.turn.collect_answers"
    assert names.START_CHILD_STEP == "helix.turn.start_child"
    assert names.CHILD_ENDED_STEP == "helix.turn.child_ended"
    assert names.LIFECYCLE_WORKFLOW == "helix.lifecycle"
    assert names.LIFECYCLE_APPLY_STEP == "helix.lifecycle.apply"
    assert names.PERSISTENT_WORKFLOW == "helix.persistent"
    assert names.PERSISTENT_HIBERNATE_STEP == "helix.persistent.hibernate"
    assert names.INBOX_TOPIC == "inbox"
    assert names.turn_workflow_id("s", "r") == "helix:s:r"
    assert names.persistent_workflow_id("s", "r") == "helix:s:persistent:r"
    assert names.inbox_idempotency_key("r") == "r:inbox"
    assert names.COMPANION_SEND_STEP == "helix.companion.send"
    assert names.COMPANION_OP_STEP == "helix.companion.op"
    assert names.COMPANION_WAKE_STEP == "helix.companion.wake_parent"
    assert names.companion_wake_run_id("s", "r") == "run_wf6f6cd3a5a3d4d27678d4bcf"
    assert names.companion_session_id("s", "reviewer") == "s.companion.reviewer"
    assert names.companion_run_id("run_1", "call_1") == "run_c407f979e230fdbf3794ec485"
    assert names.companion_run_id("run_1", "call_1") != names.companion_run_id("run_2", "call_1")
    assert names.companion_reply_slot("s", "r") == "companion:s:r:companion_reply"
    assert names.turn_outcome_event("r") == "turn:r"
    assert names.tool_result_topic("tc") == "tc"
    assert names.submit_idempotency_key("r", "tc") == "r:tc"
    assert names.approval_id("r", "tc") == "r::tc"
    assert names.child_session_id("s", "tc") == "s.tc"
    assert names.turn_slot("w", "r", 3, "model") == "w:r:3:model"
    assert names.CONTINUE_WORKFLOW == "helix.turn.continue"
    assert names.continuation_workflow_id("s", "r") == "helix:s:r:continue"
    assert names.continuation_workflow_id("s", "r", "c") == "helix:s:r:continue:c"
    assert names.child_wait_slot("w", "r", 2, "c") == "w:r:2:await_child:c"
    assert names.hibernate_slot("w", "r", 2, None) == "w:r:2:hibernate"
    assert names.hibernate_slot("w", "r", 2, "c") == "w:r:2:await_child:c"
    assert names.child_call_id(names.child_session_id("p", "c"), "p") == "c"


def test_continuation_run_ids() -> None:
    """A suspended run continues as <run>:continuation, then :continuation:2, ..."""
    assert names.next_run_id("run_1") == "run_1:continuation"
    assert names.next_run_id("run_1:continuation") == "run_1:continuation:2"
    assert names.next_run_id("run_1:continuation:2") == "run_1:continuation:3"
