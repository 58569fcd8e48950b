"""Companions and persistent agents: a persistent session's turns in one long-lived
workflow fed by its inbox (``persistent``), a parent's sends, reads and ends (``sends``), a
companion's replies handed to its parent (``replies``) and the parent's wake-up for them
(``wake_parent``).

May import: ``hibernated``, ``turn`` and the rooms below. Independent of ``submit``. Stopping
a companion's tree (``operations.control``) is found through the context's registry.
"""
