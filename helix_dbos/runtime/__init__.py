"""The durable runtime: the only package that imports DBOS.

Public: ``AgentRuntime`` and ``TurnHandle`` (also exported by ``helix_dbos``), ``Operator``
(what the CLI uses from outside a running runtime), ``Notification`` and ``DeliveryOptions``
(what notification hooks receive, and how they are delivered), ``Submission`` and ``MISSING``
(what a submit carries; ``AgentRuntime.precheck_submit`` checks one before a request stores
any of its answers: the HTTP layer's door), and the durable contract in ``names`` and
``records`` (read it, never change it without a migration story). For the operator's read
model (``helix_dbos.inspect``): what ``Operator`` reports (``WorkflowInfo``, ``ExecutorInfo``)
and the readers of what the runtime marks on a session's row (``mark_of``,
``waits_on_child``, ``continuation_id``: a hibernated turn; ``companion_views``: a session's
companions). This module is the runtime's face: the HTTP layer, the CLI and the read model
import from it, never from its rooms (the ``_`` packages and modules beside this one), which
are internal; see ARCHITECTURE.md and docs/public-api.md.
"""

from ._companions.sends import companion_views
from ._facade.operator import Operator, WorkflowInfo
from ._facade.runtime import AgentRuntime, TurnHandle
from ._notifications.hooks import DeliveryOptions, Notification
from ._operations.fleet import ExecutorInfo
from ._submit.checks import MISSING, Submission
from ._turn.hibernation import continuation_id, mark_of, waits_on_child

__all__ = [
    "MISSING",
    "AgentRuntime",
    "DeliveryOptions",
    "ExecutorInfo",
    "Notification",
    "Operator",
    "Submission",
    "TurnHandle",
    "WorkflowInfo",
    "companion_views",
    "continuation_id",
    "mark_of",
    "waits_on_child",
]
