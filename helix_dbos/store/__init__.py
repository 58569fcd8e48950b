"""The session store: the ``__agents_*`` tables, their migrations, and every read and write.

Internal: applications reach it through ``AgentRuntime`` (``runtime.store``) and operators
through ``helix_dbos.runtime.Operator``. See docs/public-api.md.

This package is the store's facade: the runtime imports what it needs from here and from no
module of the store (the import contract ``store-door``). ``SessionStore`` carries the
fleet's and DBOS's tables (``store.fleet``, ``store.dbos``); the outbox's and the decisions'
functions are named after their table here.
"""

from .approvals import APPROVALS_PAGE_DEFAULT, ApprovalPage, ApprovalQuery, list_approvals
from .connection import IntegrityError
from .decisions import answer_row as decisions_answer_row
from .decisions import expiry_row as decisions_expiry_row
from .decisions import queue as decisions_queue
from .enlist import enlist as enlist_message
from .faults import is_transient
from .fleet_tables import reuse_event
from .hibernated import DueBatch, claim_due_batches, touched_hibernated
from .history import LogRow, conversation_at, list_checkpoints, load_rows, mark_rewound
from .listing import ListedSession, recent_sessions
from .migrate import head_revision, require_current_schema, upgrade
from .outbox import OutboxRow
from .outbox import any_due as outbox_any_due
from .outbox import claim as outbox_claim
from .outbox import deliver as outbox_deliver
from .outbox import give_up as outbox_give_up
from .outbox import purge as outbox_purge
from .outbox import queue as outbox_queue
from .outbox import retry as outbox_retry
from .outbox import skip as outbox_skip
from .pending_figures import pending_figures as read_pending_figures
from .pg import listen
from .retention import Retention, RetentionSweeper
from .schema import EVENTS_CHANNEL
from .store import (
    OWNERSHIP_ATTEMPTS,
    PENDING_CLEAR_ATTEMPTS,
    Fenced,
    NoChange,
    RetryTransaction,
    SessionStore,
    guard,
    now_ms,
    patience,
)

__all__ = [
    "APPROVALS_PAGE_DEFAULT",
    "EVENTS_CHANNEL",
    "OWNERSHIP_ATTEMPTS",
    "PENDING_CLEAR_ATTEMPTS",
    "ApprovalPage",
    "ApprovalQuery",
    "DueBatch",
    "Fenced",
    "IntegrityError",
    "ListedSession",
    "LogRow",
    "NoChange",
    "OutboxRow",
    "Retention",
    "RetentionSweeper",
    "RetryTransaction",
    "SessionStore",
    "claim_due_batches",
    "conversation_at",
    "decisions_answer_row",
    "decisions_expiry_row",
    "decisions_queue",
    "enlist_message",
    "guard",
    "head_revision",
    "is_transient",
    "list_approvals",
    "list_checkpoints",
    "listen",
    "load_rows",
    "mark_rewound",
    "now_ms",
    "outbox_any_due",
    "outbox_claim",
    "outbox_deliver",
    "outbox_give_up",
    "outbox_purge",
    "outbox_queue",
    "outbox_retry",
    "outbox_skip",
    "patience",
    "read_pending_figures",
    "recent_sessions",
    "require_current_schema",
    "reuse_event",
    "touched_hibernated",
    "upgrade",
]
