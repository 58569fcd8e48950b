"""Companions and persistent agents: a persistent session's turns in one long-lived
workflow fed by its inbox (``persistent``), a parent's sends, reads and ends (``sends``), a
companion's replies handed to its parent (``replies``) and the parent's wake-up for them
(``wake_parent``).

May import: ``_hibernated``, ``_turn`` and the rooms below. Knows nothing of ``_submit``.
Stopping a companion's tree (``_operations.control``) is found in ``_context.rooms``, and so
is a persistent session's delivery where ``wake_parent`` needs it.
"""
