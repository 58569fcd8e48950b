"""The durable runtime: the only package that imports DBOS.

Public: ``AgentRuntime`` and ``TurnHandle`` (also exported by ``helix_dbos``), ``Operator``
(what the CLI uses from outside a running runtime), ``Notification`` and ``DeliveryOptions``
(what notification hooks receive, and how they are delivered), ``Submission`` and ``MISSING``
(what a submit carries; ``AgentRuntime.precheck_submit`` checks one before a request stores
any of its answers: the HTTP layer's door), and the durable contract in ``names`` and
``records`` (read it, never change it without a migration story). This module is the
runtime's face: the HTTP layer imports from it, never from its rooms (the ``_`` packages and
modules beside this one), which are internal; see ARCHITECTURE.md and docs/public-api.md.
"""

from ._facade.operator import Operator
from ._facade.runtime import AgentRuntime, TurnHandle
from ._notifications.hooks import DeliveryOptions, Notification
from ._submit.checks import MISSING, Submission

__all__ = [
    "MISSING",
    "AgentRuntime",
    "DeliveryOptions",
    "Notification",
    "Operator",
    "Submission",
    "TurnHandle",
]
