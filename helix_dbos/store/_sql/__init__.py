"""Each backend's SQL as named statements: one module per backend.

``postgres.py`` and ``sqlite.py`` hold every statement only their dialect speaks; the backend
objects of ``dialect.py`` (``Postgres``, ``SQLite``) hand them out, one picked when a store is
made. A statement that is the same on both backends stays in the module that runs it.
"""
