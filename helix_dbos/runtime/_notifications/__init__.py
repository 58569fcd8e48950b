"""Notifications: the outbox rows a commit writes for the events of a parked call
(``outbox_rows``), the hooks an app registers (``hooks``), and the dispatcher that delivers
them at least once (``dispatcher``).

May import: ``_commits`` and the runtime's base, the store, core, errors, config and
observability.
"""
