"""The front door: ``AgentRuntime`` (``runtime``) with its starts (``starts``), launch and
shutdown (``launch``), reads (``reads``), live metrics (``live_metrics``), startup facts
(``startup``), the event streams' pushed wake-ups (``event_signals``), the ``TurnHandle``
(``turn_handle``), and the ``Operator`` for use outside a running runtime (``operator``).

May import: every room of the runtime. Only ``helix_dbos.runtime`` (the package's face)
imports it; the HTTP layer and the command line go through that face.
"""
