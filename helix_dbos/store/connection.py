"""The store's connection and the errors of its statements, for the layers above it.

The runtime joins a store transaction by the connection a store method hands it and catches
a conflict (a duplicate id) by its error class; the command line tells a connection failure
from a failed statement. These are SQLAlchemy's own classes, named here so that only the
store imports SQLAlchemy (``tests/test_layering.py``).
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = [
    "AsyncConnection",
    "DBAPIError",
    "IntegrityError",
    "OperationalError",
    "SQLAlchemyError",
]
