"""Operations on sessions and the fleet: interrupt and abort (``control``), retry and rewind
(``retry``, planned by ``retry_plan``), the reconciler (``heal``), and the fleet of processes
on one database (``fleet``).

May import: every room below (``companions``, ``submit``, ``hibernated``, ``turn``, ...).
Never the ``facade``.
"""
