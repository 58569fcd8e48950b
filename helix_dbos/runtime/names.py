"""Every name DBOS persists, and the id formats built from them: the durable contract.

Changing one strands in-flight workflows (a parked turn replays by these names). Add new
names; never rename one without keeping the old one registered and noting it in CHANGELOG.md.
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "COLLECT_ANSWERS_STEP",
    "COMMIT_RESULTS_STEP",
    "COMPANION_OP_STEP",
    "COMPANION_SEND_STEP",
    "COMPANION_WAKE_STEP",
    "CHILD_ENDED_STEP",
    "CONTINUE_WORKFLOW",
    "CONTRACT_VERSION",
    "LIFECYCLE_APPLY_STEP",
    "LIFECYCLE_WORKFLOW",
    "REPLAYABLE_VERSIONS",
    "TURN_LAYOUT",
    "FINISH_STEP",
    "INBOX_TOPIC",
    "MODEL_STEP",
    "PERSISTENT_HIBERNATE_STEP",
    "PERSISTENT_WORKFLOW",
    "SERVER_TOOL_STEP",
    "START_CHILD_STEP",
    "TURN_WORKFLOW",
    "approval_id",
    "child_session_id",
    "companion_reply_slot",
    "companion_run_id",
    "companion_session_id",
    "companion_wake_run_id",
    "is_companion_session",
    "continuation_workflow_id",
    "control_idempotency_key",
    "inbox_idempotency_key",
    "next_run_id",
    "persistent_workflow_id",
    "submit_idempotency_key",
    "tool_result_topic",
    "turn_outcome_event",
    "turn_slot",
    "turn_workflow_id",
]

from ..core.contract import CONTRACT_VERSION, REPLAYABLE_VERSIONS

TURN_LAYOUT = 3
"""The step layout a new turn records, passed as its workflows' ``layout`` argument (a
recorded turn replays in the layout it recorded; the argument's default, 1, is contract-1's).

* 1 (contract-1, retired): each commit (the model's answer, a batch's results, the turn's end)
  was a DBOS step whose checkpoint slot was that step's (``<workflow>:<step id>:<kind>``). Such
  a turn is no longer replayed: it ends failed, ``framework_turn_lost`` and retryable, and
  ``retry`` runs it again (docs/migrations.md); its recorded turns are still moved forward, so
  that they end that way instead of waiting for a process of their own version;
* 2: those commits are the workflow's own code, made exactly-once by their checkpoint alone
  under ``turn_slot``; the DBOS steps a turn records are its parks (``recv``), server tools,
  answer reads before an approved tool, and sub-agent starts. Three fewer DBOS steps per round
  trip, each a recorded-output check, a record and two thread hops.
* 3 (contract-3): layout 2, and a root turn's park may hibernate (``_turn/hibernation.py``): a wait
  that times out is followed by the hibernate commit, where layout 2 waited on. A contract-2
  turn recovered by this release replays in layout 2 and never hibernates, so its recorded
  waits are taken in the order it recorded them.
"""

TURN_WORKFLOW = "helix.turn"
"""One turn of one session (root or sub-agent): model steps, tools, parks, results."""
MODEL_STEP = "helix.turn.model"
"""Calls the model and commits its answer (assistant message, pending calls, ownership) exactly
once; a replay never calls the provider again."""
SERVER_TOOL_STEP = "helix.turn.server_tool"
"""Runs a server tool (also an approved approval-gated tool)."""
COMMIT_RESULTS_STEP = "helix.turn.commit_results"
"""Commits a step's tool results, clears pending calls, writes tombstones and metrics."""
FINISH_STEP = "helix.turn.finish"
"""Records the turn's outcome (completed or failed)."""
COLLECT_ANSWERS_STEP = "helix.turn.collect_answers"
"""Reads a batch's stored answers before an approved tool runs."""
CONTINUE_WORKFLOW = "helix.turn.continue"
"""A hibernated turn's continuation: the rest of the turn, from the batch it hibernated on
(its results commit, then its next model steps), started from what the session's row and its
hibernation checkpoint record. Its id is ``continuation_workflow_id``."""
START_CHILD_STEP = "helix.turn.start_child"
"""Creates a sub-agent's session and commits its entry message, inside the parent's turn."""
CHILD_ENDED_STEP = "helix.turn.child_ended"
"""Reports the end of a sub-agent's turn that hibernated to its parent's row, inside the
sub-agent's continuation (``hibernation.child_ended``)."""

LIFECYCLE_WORKFLOW = "helix.lifecycle"
"""A retry or a rewind: applies it (one exactly-once step), then runs the turn it starts."""
LIFECYCLE_APPLY_STEP = "helix.lifecycle.apply"
"""Commits a retry's or a rewind's conversation and session state, exactly once."""

PERSISTENT_WORKFLOW = "helix.persistent"
"""A persistent agent's session: ONE workflow that runs its turns one after the other, each
taken from its inbox, until it has been idle for the agent's ``idle_ttl`` (hibernation)."""
PERSISTENT_HIBERNATE_STEP = "helix.persistent.hibernate"
"""Ends an idle persistent workflow: a compare-and-swap that wins only between turns."""
INBOX_TOPIC = "inbox"
"""The ``DBOS.recv`` topic a persistent workflow takes its next turn from (its client calls
park on their own topics, the calls' ids)."""

COMPANION_SEND_STEP = "helix.companion.send"
"""A parent's ``companion__sendMessage``: the companion's run claimed and its message handed
over (at most once per parent call: the run id is the call's), then the wait for the run to
start. A step of the parent's turn."""
COMPANION_WAKE_STEP = "helix.companion.wake_parent"
"""Starts a parent's turn (no message) for its companion's reply (``wake_parent``)."""
COMPANION_OP_STEP = "helix.companion.op"
"""A parent's ``companion__status`` or ``companion__end``, recorded in the parent's turn."""

_CONTINUATION = re.compile(r"^(?P<base>.+?):continuation(?::(?P<n>\d+))?$")


def turn_workflow_id(session_id: str, turn_id: str) -> str:
    """The workflow id of a turn: ``helix:<session>:<turn>``."""
    return f"helix:{session_id}:{turn_id}"


def continuation_workflow_id(session_id: str, run_id: str, child: str | None = None) -> str:
    """The workflow that continues a turn hibernated on ``run_id``'s batch:
    ``helix:<session>:<run>:continue``; or, for a turn hibernated while its sub-agent started
    by the call ``child`` waits, ``helix:<session>:<run>:continue:<child>``. Derived from the
    row alone, so every submit, every process and the deadline keeper start the same one
    (DBOS starts an id once)."""
    base = f"helix:{session_id}:{run_id}:continue"
    return base if child is None else f"{base}:{child}"


def child_wait_slot(workflow_id: str, run_id: str, step: int, tool_call_id: str) -> str:
    """The checkpoint id of the hibernate commit of a turn whose sub-agent (started by
    ``tool_call_id``) hibernated: ``<workflow>:<run>:<step>:await_child:<call>``."""
    return f"{turn_slot(workflow_id, run_id, step, 'await_child')}:{tool_call_id}"


def hibernate_slot(workflow_id: str, run_id: str, step: int, child: str | None) -> str:
    """The checkpoint id of a hibernate commit: the batch's, or (``child``) the wait on the
    sub-agent that call started (``child_wait_slot``)."""
    if child is None:
        return turn_slot(workflow_id, run_id, step, "hibernate")
    return child_wait_slot(workflow_id, run_id, step, child)


def child_call_id(child_session_id: str, parent_session_id: str) -> str:
    """The parent's call that started the sub-agent ``child_session_id`` (the inverse of
    ``child_session_id``)."""
    return child_session_id[len(parent_session_id) + 1 :]


def turn_slot(workflow_id: str, run_id: str, step: int, kind: str) -> str:
    """The checkpoint id of a layout-2 commit: ``<workflow>:<run>:<step>:<kind>`` (unique in
    its workflow: a run commits one model answer and one batch's results per step)."""
    return f"{workflow_id}:{run_id}:{step}:{kind}"


def persistent_workflow_id(session_id: str, run_id: str) -> str:
    """The workflow id of a persistent session's workflow, named after the run it started
    with: ``helix:<session>:persistent:<run>`` (a new one after each hibernation)."""
    return f"helix:{session_id}:persistent:{run_id}"


def inbox_idempotency_key(run_id: str) -> str:
    """The ``DBOS.send`` key of the inbox message that hands a turn to a persistent
    workflow: ``<run>:inbox`` (one delivery per run)."""
    return f"{run_id}:inbox"


def turn_outcome_event(run_id: str) -> str:
    """The ``DBOS.set_event`` key under which a persistent workflow publishes the outcome of
    the turn that started as ``run_id``: ``turn:<run>``."""
    return f"turn:{run_id}"


def tool_result_topic(tool_call_id: str) -> str:
    """The ``DBOS.recv`` topic a parked turn waits on for one call: the call's id."""
    return tool_call_id


def submit_idempotency_key(run_id: str, tool_call_id: str) -> str:
    """The ``DBOS.send`` idempotency key of a submit: ``<run>:<call>``."""
    return f"{run_id}:{tool_call_id}"


def control_idempotency_key(run_id: str, tool_call_id: str, kind: str, nonce: str = "") -> str:
    """The key of a control message (stop, wake) sent on a call's topic."""
    return f"{run_id}:{tool_call_id}:{kind}:{nonce}"


def approval_id(run_id: str, tool_call_id: str) -> str:
    """An approval's id: ``<runId>::<toolCallId>``."""
    return f"{run_id}::{tool_call_id}"


def next_run_id(run_id: str) -> str:
    """The run that continues a suspended run: ``<run>:continuation``, then ``:continuation:2``..."""
    match = _CONTINUATION.match(run_id)
    if match is None:
        return f"{run_id}:continuation"
    n = int(match.group("n") or 1) + 1
    return f"{match.group('base')}:continuation:{n}"


def child_session_id(parent_session_id: str, tool_call_id: str) -> str:
    """The session of a sub-agent started by a parent's tool call."""
    return f"{parent_session_id}.{tool_call_id}"


def companion_session_id(parent_session_id: str, companion: str) -> str:
    """The session of a parent's companion: ``<parent>.companion.<name>`` (one per parent and
    name, created by the first send)."""
    return f"{parent_session_id}.companion.{companion}"


def is_companion_session(session_id: str, parent_session_id: str | None) -> bool:
    """Whether ``session_id`` is a companion of ``parent_session_id`` (not a sub-agent)."""
    return parent_session_id is not None and session_id.startswith(
        f"{parent_session_id}.companion."
    )


def companion_run_id(parent_run_id: str, tool_call_id: str) -> str:
    """The companion's run a parent's send claims: ``run_c<24 hex>``, derived from the
    parent's run and call, so a re-executed send claims the same run (delivers once)."""
    digest = hashlib.sha256(f"{parent_run_id}\n{tool_call_id}".encode()).hexdigest()
    return f"run_c{digest[:24]}"


def companion_wake_run_id(session_id: str, trigger: str) -> str:
    """The parent's run a companion's reply wakes: ``run_w<24 hex>``, derived from the parent
    and what triggered it (the reply's run, or the parent turn that kept replies)."""
    digest = hashlib.sha256(f"{session_id}\n{trigger}".encode()).hexdigest()
    return f"run_w{digest[:24]}"


def companion_reply_slot(session_id: str, run_id: str) -> str:
    """The checkpoint id of the commit that hands a companion's reply (the end of its turn
    ``run_id``) to its parent: ``companion:<session>:<run>:companion_reply``."""
    return f"companion:{session_id}:{run_id}:companion_reply"
