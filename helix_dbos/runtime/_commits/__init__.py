"""Commits and exactly-once: a step's session writes commit once, with a checkpoint of its
result (``once``), and a turn opens by claiming its session and committing its entry message
(``opening``).

May import: the runtime's base (``_context``, ``_handover``, ``_triage``, ``records``,
``names``), the store, core, errors, config and observability. No other room.
"""
