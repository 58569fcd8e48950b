"""Operations on sessions and the fleet: interrupt and abort (``control``), retry and rewind
(``retry``, planned by ``retry_plan``), the reconciler (``heal``), and the fleet of processes
on one database (``fleet``).

May import: every room below (``_companions``, ``_submit``, ``_hibernated``, ``_turn``, ...).
Never ``_facade``.
"""
