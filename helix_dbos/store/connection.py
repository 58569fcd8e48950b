"""The errors of the store's statements, for the layers above it.

The runtime catches a conflict (a duplicate id) by its error class; the command line tells a
connection failure from a failed statement. These are SQLAlchemy's own classes, named here so
that only the store imports SQLAlchemy (``tests/test_layering.py``). No layer above the store
holds a connection: a store call joins the unit of work bound to the task
(``SessionStore.transact``).
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, SQLAlchemyError

__all__ = [
    "DBAPIError",
    "IntegrityError",
    "OperationalError",
    "SQLAlchemyError",
]
