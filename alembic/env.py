"""Alembic environment for the helix-dbos session tables.

Run from code (``helix_dbos.store.migrate.upgrade``) with a live connection in
``config.attributes["connection"]``. Our revisions keep their own version table, so a host
application's ``alembic_version`` is never touched. No logging is configured here.
"""

from __future__ import annotations

from alembic import context

from helix_dbos.store.schema import VERSION_TABLE, metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("helix-dbos migrations run from code: use `helix-dbos migrate`")


def _include_object(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    # Only our tables: a shared database also holds DBOS's and the host application's.
    if type_ == "table":
        return bool(name and name.startswith("__agents_")) and name != VERSION_TABLE
    return True


context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    include_object=_include_object,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
