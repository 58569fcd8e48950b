"""Submitting a client tool's result or an approval decision to a parked turn: what a submit
carries and the checks that need no write (``checks``), and the submit itself (``answer``).

May import: ``_hibernated``, ``_turn`` and the rooms below. Knows nothing of ``_companions``.
"""
