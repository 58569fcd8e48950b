"""The durable runtime: the only package that imports DBOS.

Public: ``AgentRuntime`` and ``TurnHandle`` (also exported by ``helix_dbos``), ``Operator``
(what the CLI uses from outside a running runtime), ``Notification`` and ``DeliveryOptions``
(what notification hooks receive, and how they are delivered), and the durable contract in ``names`` and
``records`` (read it, never change it without a migration story). Every other module here is
internal; see docs/public-api.md.
"""

from .facade.operator import Operator
from .facade.runtime import AgentRuntime, TurnHandle
from .notifications.hooks import DeliveryOptions, Notification

__all__ = ["AgentRuntime", "DeliveryOptions", "Notification", "Operator", "TurnHandle"]
