"""Every value a step records for replay, and the ids, kinds and keys stored with them.

``names.py`` holds the names DBOS persists (workflows, steps, topics); this module holds the
shapes of what is recorded under those names: a step's return value (DBOS records it, and our
exactly-once checkpoint holds it under ``{"result": ...}``), the messages a parked turn receives,
the stash a new message leaves for a parked turn, and the id formats of sessions and runs.

A parked turn that replays after a deploy reads the values recorded by the previous version.
So these shapes are a contract, like the durable names: add optional keys freely; never rename,
remove or retype a key without a compatibility path, a note in CHANGELOG.md and a bump of
``names.CONTRACT_VERSION``. ``tests/runtime/test_records.py`` pins them.
"""

# No ``from __future__ import annotations``: TypedDict must see ``NotRequired`` unevaluated
# to know which keys are optional (Python 3.11).
import uuid
from typing import Any, Final, Literal, NotRequired, TypedDict

__all__ = [
    "CHECKPOINT_KINDS",
    "CHILD_ENDS_KEY",
    "COMPANIONS_KEY",
    "COMPANION_ENDED_KEY",
    "COMPANION_NOTICES_KEY",
    "FENCED_KEY",
    "HIBERNATED_KEY",
    "HIBERNATE_ACTIONS",
    "MESSAGE_KINDS",
    "NEVER_DUE",
    "PERSISTENT_KEY",
    "PLAN_KINDS",
    "RUN_ID_PREFIX",
    "SESSION_ID_PREFIX",
    "STASH_KEY",
    "CheckpointKind",
    "CheckpointState",
    "ChildStarted",
    "CollectedAnswers",
    "CommittedResults",
    "EntryStash",
    "FencedResult",
    "FinishResult",
    "LifecycleApplied",
    "LifecycleRefused",
    "HibernateAction",
    "HibernationMark",
    "HibernationRecord",
    "InboxMessage",
    "MessageKind",
    "ModelStepResult",
    "PlanItem",
    "PersistentMark",
    "PersistentOutcome",
    "PlanKind",
    "RepairRecord",
    "ServerToolResult",
    "ToolCallRef",
    "ToolResult",
    "TurnError",
    "TurnMessage",
    "TurnOutcome",
    "TurnSummary",
    "WokenAnswers",
    "child_run_id",
    "new_run_id",
    "new_session_id",
    "marks",
    "release_mark",
]

# -- ids --------------------------------------------------------------------------------------

SESSION_ID_PREFIX: Final = "ses_"
"""A session the runtime names: ``ses_<32 hex>`` (callers may bring their own ids)."""
RUN_ID_PREFIX: Final = "run_"
"""A turn's first run: ``run_<24 hex>``; a sub-agent's: ``run_<toolCallId>``."""


def new_session_id() -> str:
    """A fresh session id: ``ses_<32 hex>``."""
    return f"{SESSION_ID_PREFIX}{uuid.uuid4().hex}"


def new_run_id() -> str:
    """A fresh turn (first run) id: ``run_<24 hex>``."""
    return f"{RUN_ID_PREFIX}{uuid.uuid4().hex[:24]}"


def child_run_id(tool_call_id: str) -> str:
    """The first run of a sub-agent started by a call: ``run_<toolCallId>`` (replay-stable)."""
    return f"{RUN_ID_PREFIX}{tool_call_id}"


# -- checkpoints ------------------------------------------------------------------------------

CheckpointKind = Literal[
    "model",
    "results",
    "finish",
    "start_child",
    "lifecycle",
    "hibernate",
    "await_child",
    "companion_reply",
    "asks",
]
"""The last part of a checkpoint id ``<workflow id>:<step id>:<kind>`` (see ``_commits/once.py``)."""
CHECKPOINT_KINDS: Final[tuple[CheckpointKind, ...]] = (
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


class CheckpointState(TypedDict):
    """The ``state`` column of an exactly-once checkpoint: the step's recorded result."""

    result: Any


FENCED_KEY: Final = "fenced"
"""The one key of a fenced step's result (``once.FENCED``)."""


class FencedResult(TypedDict):
    """What an exactly-once step records when its run was stopped or superseded: it wrote
    nothing, and the turn ends at once (``outcomes.check_fence``)."""

    fenced: str
    """Why (``Fenced.reason``)."""


# -- the model step ---------------------------------------------------------------------------

PlanKind = Literal["server", "client", "approval", "subagent", "companion", "invalid"]
"""Where a tool call runs (``triage.py``); ``client`` and ``approval`` suspend the turn."""
PLAN_KINDS: Final[tuple[PlanKind, ...]] = (
    "server",
    "client",
    "approval",
    "subagent",
    "companion",
    "invalid",
)


class ToolCallRef(TypedDict):
    """The two keys every per-call record starts with (a ``PlanItem`` or ``ToolResult`` is one)."""

    toolCallId: str
    toolName: str


class PlanItem(TypedDict):
    """One tool call of a model step, classified (``plan.plan_calls``)."""

    toolCallId: str
    toolName: str
    input: dict[str, Any]
    index: int
    """The call's position in the model's order (results are committed in this order)."""
    kind: PlanKind
    error: NotRequired[str]
    """``invalid`` only: why the call never runs."""
    asks: NotRequired[dict[str, Any]]  # a server call whose tool asked, parked as client
    subagent: NotRequired[str]
    """``subagent`` only: the agent type of the child."""
    timeoutSeconds: NotRequired[float]
    """``client`` and ``approval`` only: how long the turn waits for the answer."""
    onTimeout: NotRequired[dict[str, Any]]
    """``client`` and ``approval`` only: the tool's expiry policy, when not the default
    (``core/expiry.py``)."""
    remindBefore: NotRequired[float]
    """``client`` and ``approval`` only: seconds before the deadline of its reminder."""
    approvalPolicy: NotRequired[dict[str, Any]]
    """``approval`` only: the tool's approval policy (``core/approval_policy.py``)."""


class ModelStepResult(TypedDict):
    """What ``helix.turn.model`` records: the answer, who gave it, and what the turn does next."""

    response: dict[str, Any]
    """``LLMResponse`` in JSON form."""
    llm: str
    """The model's name (for usage rows)."""
    plan: list[PlanItem]
    deadlines: dict[str, int]
    """``toolCallId -> deadlineAt`` (epoch ms) of the calls the turn parks on."""


# -- tools ------------------------------------------------------------------------------------


class ServerToolResult(TypedDict):
    """What ``helix.turn.server_tool`` records; a tool's own failure is ``ok: False``."""

    ok: bool
    result: NotRequired[Any]
    error: NotRequired[str]
    errorCode: NotRequired[str | None]
    asks: NotRequired[dict[str, Any]]  # ``{"requests", "state"}``: it asked first (asks.py)


class ToolResult(TypedDict):
    """One call's result, as committed (``helix.turn.commit_results``) and shown to the model.

    Suspended calls (``suspended: True``) also carry how their wait ended (``_turn/resolve.py``).
    An approved approval resolves to ``runInput`` first (and no ``ok``): the tool then runs
    with it, and its ``ServerToolResult`` completes the result before anything is committed.
    """

    toolCallId: str
    toolName: str
    ok: bool
    result: NotRequired[Any]
    error: NotRequired[str]
    errorCode: NotRequired[str | None]
    suspended: NotRequired[bool]
    outcome: NotRequired[Literal["answered", "timeout", "abandoned", "not_executed"]]
    waitMs: NotRequired[int]
    deadlineAt: NotRequired[int]
    runInput: NotRequired[dict[str, Any]]
    """An approved approval's input, before its tool runs (never committed)."""
    onTimeout: NotRequired[str]
    """An expired call (``outcome: "timeout"``): the policy applied, ``error``, ``deny``,
    ``approve`` or ``result`` (``core/expiry.py``)."""
    decidedBy: NotRequired[dict[str, Any]]
    """An answered approval's decider (``Decider.dump``; a quorum's ``approvers``)."""


WokenAnswers = dict[str, int]
"""``toolCallId -> submittedAt`` (epoch ms) of the calls a parked turn was woken for with an
answer; ``collect_answers`` and ``commit_results`` take it, so the recorded call holds it."""


class CollectedAnswers(TypedDict):
    """What ``helix.turn.collect_answers`` records: a batch's stored entries (or ``None``)."""

    answers: dict[str, dict[str, Any] | None]
    """``toolCallId -> PendingCall.dump()`` of this run, ``None`` when gone or superseded."""
    abandon: bool
    """A new message with ``abandonPending`` waits: unanswered calls are abandoned."""


class CommittedResults(TypedDict):
    """What ``helix.turn.commit_results`` records."""

    results: list[ToolResult]
    """In the model's order."""
    stashedMessage: bool
    """A stashed new message was committed after the results."""


# -- the turn ---------------------------------------------------------------------------------


class TurnSummary(TypedDict):
    """The running totals a turn passes to its steps (and logs as ``turn.summary``)."""

    steps: int
    clientCalls: int
    waitMs: int
    inputTokens: int
    outputTokens: int


class TurnError(TypedDict):
    """A failed turn's typed error (stored on the session and in ``turn_end``)."""

    code: str
    message: str
    retryable: NotRequired[bool]


class TurnOutcome(TypedDict):
    """The turn workflow's result; a parent reads its sub-agent's as the tool result.

    ``stopped``: a step found the run stopped or superseded and the turn ended writing nothing.
    ``hibernated``: the turn parked past its hot window and its workflow ended; the turn goes
    on in its continuation workflow (``names.continuation_workflow_id(session, runId)``).
    """

    outcome: Literal["completed", "failed", "stopped", "hibernated"]
    text: str
    output: Any
    error: TurnError | None
    runId: str
    continueAs: NotRequired[str]
    """``hibernated``: the workflow that continues the turn, when it is not the batch's
    (``names.continuation_workflow_id(session, runId, child)``: its sub-agent hibernated)."""


class FinishResult(TypedDict):
    """What ``helix.turn.finish`` records: how the turn ended and its running totals."""

    outcome: str
    summary: TurnSummary


class ChildStarted(TypedDict):
    """What ``helix.turn.start_child`` records: the sub-agent's session, created."""

    sessionId: str


# -- retry and rewind ---------------------------------------------------------------------------


class LifecycleApplied(TypedDict):
    """What ``helix.lifecycle.apply`` records: a retry or rewind, committed."""

    ended: bool
    """The restored conversation needs no turn (it ends with the model's reply)."""
    committed: ModelStepResult | None
    """A restored batch in the model step's shape: the turn starts from it."""
    agentType: str


class LifecycleRefused(TypedDict):
    """The lifecycle workflow's result when its step refused (nothing was written)."""

    outcome: Literal["refused"]
    error: TurnError


# -- the reconciler -----------------------------------------------------------------------------


class RepairRecord(TypedDict):
    """One repair of the reconciler (``heal.Repair.dump``), as ``helix-dbos heal`` prints it."""

    sessionId: str
    workflowId: str | None
    workflowStatus: str | None
    action: str


# -- messages to a parked turn and the entry stash ----------------------------------------------

MessageKind = Literal["answer", "stop", "abandon"]
"""What a message on a call's ``recv`` topic says: an answer was stored, stop, or a new
message abandons the batch."""
MESSAGE_KINDS: Final[tuple[MessageKind, ...]] = ("answer", "stop", "abandon")


class TurnMessage(TypedDict):
    """A message sent to a parked turn on ``names.tool_result_topic(toolCallId)``."""

    kind: MessageKind
    toolCallId: NotRequired[str]
    """``answer`` only."""
    submittedAt: NotRequired[int]
    """``answer`` only: when the answer was stored (the woken turn waits until it sees it)."""


STASH_KEY: Final = "entryInput"
"""The session-metadata key holding a new message delivered over a parked batch. Every path
that ends or drains the batch pops it (commit_results, finish, stop, a new turn's claim)."""


class EntryStash(TypedDict):
    """``metadata["entryInput"]``: the message ``resume(with_message)`` left for a parked turn."""

    message: str
    abandonPending: bool
    runId: str
    """The suspended run the message was delivered over (it continues as ``next_run_id``)."""


# -- persistent agents --------------------------------------------------------------------------

PERSISTENT_KEY: Final = "persistent"
"""The session-metadata key naming a persistent session's LIVE workflow (``PersistentMark``).
While it is set, a new message is delivered to that workflow's inbox; hibernation, a stop and
the reconciler's end remove it (each in the transaction that ends the workflow's claim), and
the next message then starts a new workflow."""


class PersistentMark(TypedDict):
    """``metadata["persistent"]``: the workflow that takes this session's next message."""

    workflowId: str
    """``names.persistent_workflow_id``."""
    since: int
    """When the workflow started (epoch ms)."""


def marks(metadata: dict[str, Any], workflow_id: str | None) -> bool:
    """Whether the session's persistent mark names ``workflow_id`` as its live workflow."""
    mark = metadata.get(PERSISTENT_KEY)
    return (
        workflow_id is not None and isinstance(mark, dict) and mark.get("workflowId") == workflow_id
    )


def release_mark(metadata: dict[str, Any], workflow_id: str | None) -> bool:
    """Remove the persistent mark if it names ``workflow_id`` (a workflow that is ending);
    ``True`` if it did. A mark naming another workflow is left: that one is still live."""
    if not marks(metadata, workflow_id):
        return False
    del metadata[PERSISTENT_KEY]
    return True


class InboxMessage(TypedDict):
    """The message on ``names.INBOX_TOPIC`` that hands a persistent workflow its next turn.
    The turn's entry (its user message) is already committed, with the session claimed for
    ``runId``, in the transaction that sent this."""

    kind: Literal["turn"]
    runId: str


# -- companions ----------------------------------------------------------------------------------

COMPANIONS_KEY: Final = "companions"
"""The parent's session-metadata key of its companion references: ``{name: {"sessionId",
"since"}}``, written by the first send to each (docs/companions.md)."""
COMPANION_NOTICES_KEY: Final = "companionNotices"
"""The parent's session-metadata key of companion replies that came while a parent turn ran:
``[{"companion", "sessionId", "runId", "text"}]``, appended to its conversation (as
notifications) by its next entry."""
COMPANION_ENDED_KEY: Final = "companionEnded"
"""A companion's session-metadata key once it was ended (``{"at", "reason"}``): a send to it
answers ``child_exited``."""

HibernateAction = Literal["continue", "hibernated", "released"]
"""What ``helix.persistent.hibernate`` records: ``continue`` (a turn was claimed for this
workflow meanwhile: its message waits in the inbox), ``hibernated`` (idle: the mark is
removed and the workflow ends) or ``released`` (the session no longer names this workflow)."""
HIBERNATE_ACTIONS: Final[tuple[HibernateAction, ...]] = ("continue", "hibernated", "released")


class PersistentOutcome(TypedDict):
    """The persistent workflow's result."""

    turns: int
    """Turns it ran."""
    ended: Literal["hibernated", "released"]
    lastRunId: str


# -- hibernation --------------------------------------------------------------------------------

HIBERNATED_KEY: Final = "hibernated"
"""The session-metadata key of a hibernated turn (``HibernationMark``): its workflow ended
while its batch waits, and the batch's continuation starts from the row. The continuation's
results commit, a stop and the reconciler's end remove it."""


class HibernationMark(TypedDict):
    """``metadata["hibernated"]``: where a hibernated turn continues from, and when."""

    at: int
    """When the turn hibernated (epoch ms)."""
    workflowId: str
    """The workflow whose checkpoint slots the turn's commits use (the turn's first workflow;
    ``names.turn_slot``): its continuation commits under the same slots."""
    step: int
    """The model step whose batch waits."""
    dueAt: int
    """When the continuation must start with no request (epoch ms): the latest deadline of the
    batch's unanswered calls, ``0`` once a submit completed the batch (or a new message
    abandoned it), or a deadline keeper's lease while it starts the continuation. A turn
    waiting on its sub-agent (``child``) is due only once the sub-agent's turn ends
    (``NEVER_DUE`` until then)."""
    child: NotRequired[str]
    """Set when the turn hibernated because its sub-agent, started by this call, hibernated:
    the turn goes on once that sub-agent's turn ends (``CHILD_ENDS_KEY``), not on answers."""


NEVER_DUE: Final = 2**62
"""The ``dueAt`` of a turn waiting on its sub-agent: no deadline makes it due."""

CHILD_ENDS_KEY: Final = "childEnds"
"""The session-metadata key where a sub-agent that hibernated reports its turn's end to its
parent: ``{toolCallId: TurnOutcome}``, written by the sub-agent's last continuation (or the
stop that ended it) and read by the parent's; the parent's results commit removes it."""


class HibernationRecord(TypedDict):
    """What the hibernate commit records (``turn_slot(..., "hibernate")``).

    ``hibernated: False``: the batch was already complete when the hot window ended, so the
    turn went on live. Otherwise the state the continuation takes the turn up from.
    """

    hibernated: bool
    childOutcome: NotRequired[TurnOutcome]
    """``hibernated: False`` on a sub-agent's wait: the sub-agent's turn had ended already."""
    child: NotRequired[str]
    """The call whose sub-agent the turn waits on (``HibernationMark.child``)."""
    step: NotRequired[int]
    plan: NotRequired[list[PlanItem]]
    """The step's plan, without the calls' inputs (each pending entry holds its own)."""
    results: NotRequired[dict[str, ToolResult]]
    """The batch's results known before the park (server tools, sub-agents, invalid calls)."""
    summary: NotRequired[TurnSummary]
