"""The Alembic revisions: upgrade paths, data survival, no drift, the version table, the lock."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import uuid
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url

from helix_dbos.config import parse_database_url
from helix_dbos.errors import ConfigError, SchemaNotCurrentError
from helix_dbos.store import migrate
from helix_dbos.store.hibernated import DUE_INDEX
from helix_dbos.store.migrate import (
    current_revision,
    head_revision,
    require_current_schema,
    script_location,
    upgrade,
)
from helix_dbos.store.schema import (
    ENDED_ROOTS_INDEX,
    LIVE_UPDATED_INDEX,
    VERSION_TABLE,
    metadata,
)
from helix_dbos.store.store import SessionStore
from tests.processes import reaped

REVISIONS = [
    "0001",
    "0002",
    "0003",
    "0004",
    "0005",
    "0006",
    "0007",
    "0008",
    "0009",
    "0010",
    "0011",
    "0012",
    "0013",
    "0014",
    "0015",
]
OUR_TABLES = {
    "__agents_states",
    "__agents_messages",
    "__agents_usage",
    "__agents_checkpoints",
    "__agents_events",
    "__agents_executors",
    "__agents_adoptions",
    "__agents_approvals",
    "__agents_notifications",
    "__agents_approval_decisions",
    "__agents_approval_counts",
}


def engine(url: str) -> sa.Engine:
    """A sync engine on a user-facing URL."""
    return sa.create_engine(parse_database_url(url).sync, poolclass=sa.pool.NullPool)


def run(url: str, sql: str, **params: Any) -> list[Any]:
    """Run one statement in its own transaction; return its rows (if any)."""
    eng = engine(url)
    try:
        with eng.begin() as conn:
            result = conn.execute(sa.text(sql), params)
            return list(result.all()) if result.returns_rows else []
    finally:
        eng.dispose()


def as_json(value: Any) -> Any:
    """A JSON column read with plain SQL: parsed by psycopg, text on SQLite."""
    return json.loads(value) if isinstance(value, str) else value


def tables(url: str) -> set[str]:
    """The tables in the database (public schema on Postgres)."""
    eng = engine(url)
    try:
        return set(sa.inspect(eng).get_table_names())
    finally:
        eng.dispose()


def columns(url: str, table: str) -> set[str]:
    """A table's column names."""
    eng = engine(url)
    try:
        return {c["name"] for c in sa.inspect(eng).get_columns(table)}
    finally:
        eng.dispose()


def _only_ours(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    if type_ == "table":
        return bool(name and name.startswith("__agents_")) and name != VERSION_TABLE
    # Partial indexes on JSON expressions, which a Table cannot declare on both dialects
    # alike: revisions 0010, 0011 and 0013 create them, and tests/store/test_hibernated.py
    # and tests/store/test_retention.py check that each exists and that its query uses it.
    return not (type_ == "index" and name in (DUE_INDEX, LIVE_UPDATED_INDEX, ENDED_ROOTS_INDEX))


def drift(url: str, target: sa.MetaData = metadata) -> list[Any]:
    """Alembic's autogenerate comparison of the live database with ``target``."""
    eng = engine(url)
    try:
        with eng.connect() as conn, warnings.catch_warnings():
            # Reflection skips the expression index (excluded above) with a warning.
            warnings.filterwarnings("ignore", "Skipped unsupported reflection", sa.exc.SAWarning)
            context = MigrationContext.configure(
                conn,
                opts={
                    "include_object": _only_ours,
                    "compare_type": True,
                    "compare_server_default": True,
                },
            )
            return list(compare_metadata(context, target))
    finally:
        eng.dispose()


# -- the revision chain ---------------------------------------------------------------------


def test_revisions_form_one_ordered_chain() -> None:
    """Revisions are 0001..head, each revising the one before, with a single head."""
    scripts = ScriptDirectory(str(script_location()))
    chain = [r.revision for r in scripts.walk_revisions()][::-1]
    assert chain == REVISIONS
    assert scripts.get_heads() == [REVISIONS[-1]] == [head_revision()]
    for rev in scripts.walk_revisions():
        assert Path(rev.path).name.startswith(f"{rev.revision}_")
        assert rev.down_revision == (
            None if rev.revision == "0001" else f"{int(rev.revision) - 1:04d}"
        )


# -- upgrade --------------------------------------------------------------------------------


def test_upgrade_from_empty_to_head(db_url: str) -> None:
    """An empty database gets every table at head; a second upgrade changes nothing."""
    assert current_revision(db_url) is None
    assert upgrade(db_url) == head_revision() == REVISIONS[-1]
    assert current_revision(db_url) == REVISIONS[-1]
    assert tables(db_url) == OUR_TABLES | {VERSION_TABLE}
    assert upgrade(db_url) == REVISIONS[-1]
    assert run(db_url, f"SELECT version_num FROM {VERSION_TABLE}") == [(REVISIONS[-1],)]


_PARKED_APPROVAL = json.dumps(
    {
        "call-1": {
            "toolCallId": "call-1",
            "toolName": "pay",
            "input": {"amount": 5},
            "runId": "run-1",
            "kind": "approval",
            "index": 0,
            "deadlineAt": 1700000060000,
            "registeredAt": 1700000000000,
            "completedRetentionMs": 0,
            "approvalId": "run-1::call-1",
            "argsDigest": "d",
        }
    }
)


async def test_each_revision_keeps_earlier_data(db_url: str) -> None:
    """Step 0001 -> head with rows written at each step; every row survives and reads at head."""
    created = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)

    assert upgrade(db_url, "0001") == "0001"
    assert tables(db_url) == {"__agents_states", "__agents_messages", VERSION_TABLE}
    assert "pending_client_tool_calls" not in columns(db_url, "__agents_states")
    run(
        db_url,
        "INSERT INTO __agents_states (session_id, agent_type, root_session_id, status,"
        " run_id, version, metadata, created_at, updated_at) VALUES ('old', 'assistant', 'old',"
        " 'suspended_client_tool', 'run-1', 3, '{\"tenant\": \"acme\"}', :t, :t)",
        t=created,
    )
    run(
        db_url,
        "INSERT INTO __agents_messages (session_id, role, content, created_at)"
        " VALUES ('old', 'user', '{\"content\": \"hello\"}', :t)",
        t=created,
    )

    assert upgrade(db_url, "0002") == "0002"
    [row] = run(
        db_url,
        "SELECT pending_client_tool_calls, client_tool_call_ownership, version, metadata"
        " FROM __agents_states",
    )
    assert [as_json(row[0]), as_json(row[1]), row[2], as_json(row[3])] == [
        {},
        {},
        3,
        {"tenant": "acme"},
    ]

    assert upgrade(db_url, "0003") == "0003"
    run(
        db_url,
        "INSERT INTO __agents_usage (session_id, kind, source_type, source_name, data,"
        " timestamp, dedupe_key) VALUES ('old', 'custom', 'client_tool_wait_ms', 'pick_file',"
        " '{\"value\": 250}', 1700000000000, 'k1')",
    )

    assert upgrade(db_url, "0004") == "0004"
    assert run(db_url, "SELECT completed_client_tool_calls IS NULL FROM __agents_states") in (
        [(True,)],
        [(1,)],
    )

    assert upgrade(db_url, "0005") == "0005"
    assert run(db_url, "SELECT latest_checkpoint_id FROM __agents_states") == [(None,)]
    run(
        db_url,
        "INSERT INTO __agents_checkpoints (checkpoint_id, session_id, run_id, step_count,"
        " message_count, state, created_at) VALUES ('cp-1', 'old', 'run-1', 2, 1, '{}', :t)",
        t=created,
    )
    run(db_url, "UPDATE __agents_states SET latest_checkpoint_id = 'cp-1'")

    assert upgrade(db_url, "0006") == "0006"
    assert upgrade(db_url, "0007") == "0007"
    # An approval parked before 0008: the revision copies it into the inbox.
    run(db_url, "UPDATE __agents_states SET pending_client_tool_calls = :p", p=_PARKED_APPROVAL)
    assert upgrade(db_url, "0008") == "0008"
    assert run(db_url, "SELECT principal, tenant FROM __agents_states") == [(None, None)]
    assert run(
        db_url, "SELECT session_id, tool_call_id, approval_id, tool_name FROM __agents_approvals"
    ) == [("old", "call-1", "run-1::call-1", "pay")]
    # ... and its triggers keep it: the call leaves the map, and the inbox.
    run(db_url, "UPDATE __agents_states SET pending_client_tool_calls = '{}'")
    assert run(db_url, "SELECT count(*) FROM __agents_approvals") == [(0,)]
    assert upgrade(db_url, "0009") == "0009"
    assert run(db_url, "SELECT count(*) FROM __agents_notifications") == [(0,)]
    assert upgrade(db_url) == head_revision()
    assert drift(db_url) == []

    # At head, the store reads and writes every old row.
    store = SessionStore.from_url(db_url)
    try:
        old = await store.get("old")
        assert (old.version, old.status, old.run_id) == (3, "suspended_client_tool", "run-1")
        assert (old.pending, old.ownership, old.completed) == ({}, {}, {})
        assert old.metadata == {"tenant": "acme"}
        assert [m.content for m in await store.load_messages("old")] == ["hello"]
        assert (await store.latest_checkpoint("old") or {})["checkpoint_id"] == "cp-1"
        assert await store.append_events("old", "run-1", [{"type": "turn_start"}]) == 1
        saved, _ = await store.update(["old"], lambda states: None)
        assert saved["old"].version == 4
        await store.record_usage(
            [{"source_type": "client_tool_wait_ms", "dedupe_key": "k1", "value": 999}]
        )
    finally:
        await store.close()
    assert [as_json(d) for (d,) in run(db_url, "SELECT data FROM __agents_usage")] == [
        {"value": 250}
    ]


# -- no drift -------------------------------------------------------------------------------


def test_no_drift_between_revisions_and_schema(db_url: str) -> None:
    """Autogenerate finds no difference between the migrated tables and schema.metadata."""
    upgrade(db_url)
    assert drift(db_url) == []


def test_drift_check_can_fail(db_url: str) -> None:
    """The comparison does see a column the revisions never created."""
    upgrade(db_url)
    changed = sa.MetaData(naming_convention=metadata.naming_convention)
    for table in metadata.tables.values():
        table.to_metadata(changed)
    changed.tables["__agents_usage"].append_column(sa.Column("unreleased", sa.Text))
    diffs = drift(db_url, changed)
    assert [(d[0], d[2], d[3].name) for d in diffs] == [
        ("add_column", "__agents_usage", "unreleased")
    ]


# -- our own version table ------------------------------------------------------------------


def test_host_alembic_version_is_untouched(db_url: str) -> None:
    """A host application's alembic_version keeps its row; ours is __agents_alembic_version."""
    run(db_url, "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
    run(db_url, "INSERT INTO alembic_version (version_num) VALUES ('hostapp_42')")
    upgrade(db_url)
    assert run(db_url, "SELECT version_num FROM alembic_version") == [("hostapp_42",)]
    assert run(db_url, f"SELECT version_num FROM {VERSION_TABLE}") == [(REVISIONS[-1],)]
    assert current_revision(db_url) == REVISIONS[-1]


def test_no_alembic_version_is_created(db_url: str) -> None:
    """Migrating a database without a host Alembic history creates no alembic_version."""
    upgrade(db_url)
    assert "alembic_version" not in tables(db_url)


# -- concurrent upgrades --------------------------------------------------------------------


def test_concurrent_upgrades_in_threads(pg_url: str) -> None:
    """Four threads migrating one fresh database at once all succeed (the advisory lock)."""
    barrier = threading.Barrier(4)
    results: list[str] = []
    errors: list[BaseException] = []

    def migrate_now() -> None:
        barrier.wait()
        try:
            results.append(upgrade(pg_url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=migrate_now) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert results == [REVISIONS[-1]] * 4
    assert run(pg_url, f"SELECT version_num FROM {VERSION_TABLE}") == [(REVISIONS[-1],)]
    assert drift(pg_url) == []


def test_concurrent_upgrades_in_processes(pg_url: str) -> None:
    """Two processes that start migrating the same fresh database together both succeed."""
    script = textwrap.dedent(
        f"""
        import sys
        from helix_dbos.store.migrate import upgrade
        print("ready", flush=True)
        sys.stdin.readline()
        print(upgrade({pg_url!r}))
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    with reaped(procs[0]), reaped(procs[1]):
        # Both have imported everything; release them at the same moment.
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [p.communicate(timeout=60) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert out.strip() == REVISIONS[-1]
    assert run(pg_url, f"SELECT version_num FROM {VERSION_TABLE}") == [(REVISIONS[-1],)]


# -- the schema check -----------------------------------------------------------------------


def test_require_current_schema(db_url: str) -> None:
    """Unmigrated or behind: SchemaNotCurrentError naming the command; at head: passes."""
    with pytest.raises(SchemaNotCurrentError) as info:
        require_current_schema(db_url)
    err = info.value
    assert "`helix-dbos migrate`" in err.message
    assert migrate.MIGRATE_COMMAND == "helix-dbos migrate"
    assert (err.code, err.http_status) == ("schema_not_current", 503)
    assert err.details == {"current": None, "head": REVISIONS[-1]}
    assert "revision none" in err.message

    upgrade(db_url, "0003")
    with pytest.raises(SchemaNotCurrentError) as info:
        require_current_schema(db_url)
    assert info.value.details["current"] == "0003"
    assert "helix-dbos migrate" in info.value.message

    upgrade(db_url)
    require_current_schema(db_url)


@pytest.fixture
def restricted_role(pg_url: str) -> Iterator[tuple[str, str]]:
    """A login role that may connect and use schema public, but may not run DDL: (role, url)."""
    role = f"helix_app_{uuid.uuid4().hex[:10]}"
    db = pg_url.rpartition("/")[2]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'REVOKE ALL ON DATABASE "{db}" FROM PUBLIC')
        conn.execute(f'GRANT CONNECT ON DATABASE "{db}" TO "{role}"')
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
    try:
        yield role, make_url(pg_url).set(username=role, password=None).render_as_string(False)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def test_role_without_ddl_gets_the_command(restricted_role: tuple[str, str], pg_url: str) -> None:
    """As a role that may not run DDL, the check on an unmigrated database names the command."""
    role, role_url = restricted_role
    with psycopg.connect(role_url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("CREATE TABLE probe (x int)")  # the role really cannot run DDL
    with pytest.raises(SchemaNotCurrentError) as info:
        require_current_schema(role_url)
    assert "Run `helix-dbos migrate`" in info.value.message
    assert "may run DDL" in info.value.message
    # It cannot migrate either, and nothing was half-created.
    with pytest.raises(sa.exc.ProgrammingError):
        upgrade(role_url)
    assert tables(pg_url) == set()

    # An owner migrates and grants the app role its rows: now the check passes for it.
    upgrade(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
    require_current_schema(role_url)


def test_role_without_grants_is_told_what_to_grant(
    restricted_role: tuple[str, str], pg_url: str
) -> None:
    """Migrated by the owner but never granted: a ConfigError naming the grants, not a raw error."""
    role, role_url = restricted_role
    upgrade(pg_url)
    with pytest.raises(ConfigError) as info:
        require_current_schema(role_url)
    assert "__agents_alembic_version" in info.value.message
    assert "grant it SELECT" in info.value.message
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
    require_current_schema(role_url)


def test_script_location_in_a_checkout() -> None:
    """From a source checkout the scripts are the repository's alembic/ folder."""
    location = script_location()
    assert (location / "env.py").is_file()
    assert (location / "script.py.mako").is_file()
    assert sorted(p.name[:4] for p in (location / "versions").glob("0*.py")) == REVISIONS
