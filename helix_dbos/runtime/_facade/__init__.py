"""The front door: ``AgentRuntime`` with its launch, shutdown and entries (``runtime``), its
reads (``reads``), startup facts (``startup``), the event streams' pushed wake-ups
(``event_signals``), the ``TurnHandle`` (``turn_handle``), and the ``Operator`` for use
outside a running runtime (``operator``).

May import: every room of the runtime. Only ``helix_dbos.runtime`` (the package's face) and
the command line import it; the HTTP layer goes through the face.
"""
