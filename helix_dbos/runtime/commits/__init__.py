"""Commits and exactly-once: a step's session writes commit once, with a checkpoint of its
result (``once``), and a turn opens by claiming its session and committing its entry message
(``opening``).

May import: the runtime's base (``names``, ``records``, ``context``, ``handover``, ``triage``),
the store, core, errors and observability. Nothing of the other rooms.
"""
