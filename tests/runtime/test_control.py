"""The pure parts of a stop and of a message stashed over pending calls (``_operations/control.py``): what
a stop records on a tree's rows and counts, and when a new message may be stashed.

The stop and the stash as a whole, on a real runtime, are in ``test_interrupt.py`` and
``test_with_message.py``; the mutations run twice in ``test_pure_mutations.py``.
"""

from __future__ import annotations

import copy

import pytest

from helix_dbos.core.session import SessionState
from helix_dbos.runtime._operations.control import (
    _awaits_sub_agents,
    _record_stop,
    _stash_on,
    _still_awaited,
    _stop_error,
    _stop_usage_rows,
)
from helix_dbos.runtime.records import HIBERNATED_KEY, NEVER_DUE, PERSISTENT_KEY, STASH_KEY
from helix_dbos.store.store import NoChange
from tests.support.builders import REGISTERED_AT, WAIT_MS, pending_call, session_state

AT = REGISTERED_AT + 500


def parked(session_id: str = "ses_1", root: str | None = None, **fields: object) -> SessionState:
    """A session whose turn ``run_1`` is parked on the client calls ``call_1`` and ``call_2``."""
    calls = [
        pending_call("call_2", index=1, submitted_at=REGISTERED_AT + 10, response={"result": 2}),
        pending_call("call_1", index=0),
    ]
    values: dict[str, object] = {
        "status": "suspended_client_tool",
        "run_id": "run_1",
        "workflow_id": f"wf_{session_id}",
        "pending": {p.tool_call_id: p for p in calls},
    }
    return session_state(session_id, root, **{**values, **fields})


def test_only_an_abort_records_an_error() -> None:
    """An interrupt ends a session with no error; an abort with ``framework_cancelled`` and
    the reason given, or a default message."""
    assert _stop_error(False, "ignored") is None
    assert _stop_error(True, "operator said so") == {
        "code": "framework_cancelled",
        "message": "operator said so",
    }
    assert _stop_error(True, None) == {
        "code": "framework_cancelled",
        "message": "The session was aborted",
    }


@pytest.mark.parametrize("abort", [False, True])
def test_a_stop_ends_every_active_session_of_the_tree(abort: bool) -> None:
    """Each active session loses its calls (tombstoned on the root), its stash, its
    hibernation and its persistent mark, and ends ``interrupted`` or ``failed``; an idle one
    is left alone. The calls cleared and the sessions ended are returned."""
    root = parked(
        metadata={
            STASH_KEY: {"message": "m", "abandonPending": False, "runId": "run_1"},
            HIBERNATED_KEY: {"dueAt": 0},
            PERSISTENT_KEY: {"workflowId": "wf_ses_1", "since": 1},
        },
        ownership={"call_1": "ses_1", "call_2": "ses_1", "call_9": "ses_3"},
    )
    child = session_state("ses_2", "ses_1", status="running", run_id="run_c", workflow_id="wf_c")
    idle = session_state("ses_3", "ses_1", status="idle")
    states = {"ses_1": root, "ses_2": child, "ses_3": idle}
    error = _stop_error(abort, None)
    stopped, ended = _record_stop(states, "ses_1", ["ses_1", "ses_2", "ses_3"], AT, error)
    assert ended == ["ses_1", "ses_2"]
    assert sorted((s.session_id, e.tool_call_id) for s, e in stopped) == [
        ("ses_1", "call_1"),
        ("ses_1", "call_2"),
    ]
    expected = "failed" if abort else "interrupted"
    assert (root.status, child.status, idle.status) == (expected, expected, "idle")
    assert (root.error, child.error) == (error, error)
    assert root.pending == {} and root.metadata == {}
    assert root.ownership == {"call_9": "ses_3"}
    assert {k: t.outcome for k, t in root.completed.items()} == {
        "call_1": "stopped",
        "call_2": "stopped",
    }


def test_a_stop_of_a_tree_with_nothing_active_changes_nothing() -> None:
    """A tree that ended meanwhile (the transaction ran again, say): ``NoChange``."""
    states = {"ses_1": session_state(status="completed")}
    before = copy.deepcopy(states)
    with pytest.raises(NoChange) as raised:
        _record_stop(states, "ses_1", ["ses_1"], AT, None)
    assert raised.value.value == ([], [])
    assert states == before


def test_a_stops_usage_is_an_abort_count_and_a_wait_per_call() -> None:
    """Two rows a cleared call, each keyed by its run and call (a retried commit writes them
    once); the wait runs from the call's registration to the stop."""
    state = parked()
    stopped = [(state, state.pending["call_1"]), (state, state.pending["call_2"])]
    rows = _stop_usage_rows(stopped, AT)
    assert [(r["source_type"], r["dedupe_key"], r["data"]["value"]) for r in rows] == [
        ("client_tool_abort", "run_1:call_1:client_tool_abort", 1),
        ("client_tool_wait_ms", "run_1:call_1:client_tool_wait_ms", 500),
        ("client_tool_abort", "run_1:call_2:client_tool_abort", 1),
        ("client_tool_wait_ms", "run_1:call_2:client_tool_wait_ms", 500),
    ]
    assert {(r["session_id"], r["timestamp"]) for r in rows} == {("ses_1", AT)}
    assert _stop_usage_rows([], AT) == []


def test_a_message_waits_for_sub_agents_with_calls_or_a_turn() -> None:
    """Only what is below the top counts: the top's own calls are the batch to stash over."""
    top = parked()
    assert not _awaits_sub_agents([top])
    assert not _awaits_sub_agents([top, session_state("ses_2", "ses_1", status="completed")])
    assert _awaits_sub_agents([top, session_state("ses_2", "ses_1", status="running")])
    assert _awaits_sub_agents([top, parked("ses_2", "ses_1", status="completed")])


def test_the_calls_still_awaited_are_unanswered_and_not_lapsed() -> None:
    """``call_2`` is answered; ``call_1`` awaits until its deadline, and another run's call
    is not of the batch."""
    root = parked()
    root.pending["call_x"] = pending_call("call_x", run_id="run_0")
    assert _still_awaited(root, "run_1", AT) == ["call_1"]
    assert _still_awaited(root, "run_1", REGISTERED_AT + WAIT_MS) == []
    assert _still_awaited(root, "run_2", AT) == []


@pytest.mark.parametrize("abandon", [False, True])
def test_a_message_is_stashed_once_over_its_batch(abandon: bool) -> None:
    """The stash records the message for the parked run and names every call of the batch
    (answered ones too) to wake, in the model's order; a second stash changes nothing."""
    s = parked()
    assert _stash_on(s, "run_1", "hello", abandon) == ["call_1", "call_2"]
    assert s.metadata[STASH_KEY] == {
        "message": "hello",
        "abandonPending": abandon,
        "runId": "run_1",
    }
    with pytest.raises(NoChange):
        _stash_on(s, "run_1", "again", abandon)
    assert s.metadata[STASH_KEY]["message"] == "hello"


@pytest.mark.parametrize(
    "changed",
    [{"status": "running"}, {"run_id": "run_2"}, {"pending": {}}],
    ids=["not parked", "another run", "no batch"],
)
def test_no_stash_on_a_turn_no_longer_parked_on_the_batch(changed: dict[str, object]) -> None:
    """The batch is being drained (or the run moved on): ``NoChange(None)``, nothing written."""
    s = parked().model_copy(update=changed)
    with pytest.raises(NoChange) as raised:
        _stash_on(s, "run_1", "hello", True)
    assert raised.value.value is None
    assert STASH_KEY not in s.metadata


@pytest.mark.parametrize(
    ("abandon", "child", "due_at", "due"),
    [
        (True, None, 99, 0),
        (False, None, 99, 99),
        (True, "call_1", NEVER_DUE, NEVER_DUE),
        (True, "call_1", 99, 0),
    ],
    ids=["abandon", "drain first", "waits on its sub-agent", "its sub-agent ended, claimed"],
)
def test_an_abandon_makes_a_hibernated_batch_due_now(
    abandon: bool, child: str | None, due_at: int, due: int
) -> None:
    """A hibernated batch abandoned by the message waits no more (due at once); one drained
    first keeps its deadline, and a turn waiting on its sub-agent drains once it ends. A
    turn whose sub-agent has ended (a keeper's claim has moved its due time to the end of a
    lease) waits on nothing more: due at once too."""
    s = parked(metadata={HIBERNATED_KEY: {"dueAt": due_at, "child": child}})
    _stash_on(s, "run_1", "hello", abandon)
    assert s.metadata[HIBERNATED_KEY]["dueAt"] == due
