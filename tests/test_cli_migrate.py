"""``helix-dbos migrate``: upgrades, reports the revision, and fails in one line with exit 2."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from helix_dbos.cli import Command, _commands, build_parser, main, register
from helix_dbos.store.migrate import current_revision, head_revision, upgrade


@pytest.fixture(autouse=True)
def no_env_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test starts without HELIX_DATABASE_URL, in an empty working directory."""
    monkeypatch.delenv("HELIX_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """main(argv) in process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_failure(code: int, out: str, err: str) -> str:
    """Exit 2, nothing on stdout, a single line on stderr and no traceback."""
    assert code == 2
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert err.startswith("helix-dbos migrate: ")
    return err


def run_json(capsys: pytest.CaptureFixture[str], url: str, revision: str = "head") -> str:
    """migrate --json to ``revision``; its stdout."""
    code, out, _ = run_cli(
        capsys, "migrate", "--database-url", url, "--revision", revision, "--json"
    )
    assert code == 0
    return out


def test_migrate_sqlite(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    """migrate --database-url upgrades to head and prints the revision; again is unchanged."""
    code, out, err = run_cli(capsys, "migrate", "--database-url", sqlite_url)
    assert (code, err) == (0, "")
    assert f"revision {head_revision()}" in out
    assert "was empty" in out
    assert current_revision(sqlite_url) == head_revision()
    code, out, _ = run_cli(capsys, "migrate", "--database-url", sqlite_url)
    assert code == 0
    assert "unchanged" in out


def test_migrate_postgres_json(capsys: pytest.CaptureFixture[str], pg_url: str) -> None:
    """--json prints the revisions before and after, the head, and the database."""
    code, out, _ = run_cli(capsys, "migrate", "--database-url", pg_url, "--json")
    assert code == 0
    assert json.loads(out) == {
        "revision": head_revision(),
        "previous": None,
        "head": head_revision(),
        "database": pg_url,
    }


def test_migrate_reads_helix_database_url(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    """Without --database-url, HELIX_DATABASE_URL is used."""
    monkeypatch.setenv("HELIX_DATABASE_URL", pg_url)
    code, _, _ = run_cli(capsys, "migrate", "--json")
    assert code == 0
    assert current_revision(pg_url) == head_revision()


def test_migrate_defaults_to_embedded_sqlite(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """With no URL at all, the embedded default sqlite:///helix.sqlite is migrated."""
    code, out, _ = run_cli(capsys, "migrate", "--json")
    assert code == 0
    assert json.loads(out)["database"] == "sqlite:///helix.sqlite"
    assert (tmp_path / "helix.sqlite").is_file()


def test_migrate_to_a_revision(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    """--revision stops at an older revision; a later run brings it to head."""
    code, out, _ = run_cli(capsys, "migrate", "--database-url", sqlite_url, "--revision", "0003")
    assert code == 0
    assert f"head is {head_revision()}" in out
    assert current_revision(sqlite_url) == "0003"
    assert json.loads(run_json(capsys, sqlite_url))["previous"] == "0003"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mysql://app:hunter2@db/app", "Unsupported database URL scheme"),
        ("postgresql://app:hunter2@db-host", "names no database"),
        ("sqlite:///:memory:", "in-memory"),
        ("nonsense", "Not a database URL"),
    ],
)
def test_bad_url(capsys: pytest.CaptureFixture[str], url: str, expected: str) -> None:
    """A URL we cannot use: one clear line, exit 2, and the password is not shown."""
    err = assert_one_line_failure(*run_cli(capsys, "migrate", "--database-url", url))
    assert expected in err
    assert "hunter2" not in err


def test_unreachable_postgres(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listening: one line naming the database (password hidden), exit 2."""
    url = "postgresql://app:hunter2@127.0.0.1:1/app"
    err = assert_one_line_failure(*run_cli(capsys, "migrate", "--database-url", url))
    assert "cannot connect to the database postgresql://app:***@127.0.0.1:1/app" in err
    assert "hunter2" not in err


def test_missing_postgres_database(capsys: pytest.CaptureFixture[str], pg_url: str) -> None:
    """A database that does not exist is reported as such."""
    url = pg_url.rpartition("/")[0] + f"/missing_{uuid.uuid4().hex[:8]}"
    err = assert_one_line_failure(*run_cli(capsys, "migrate", "--database-url", url))
    assert "does not exist" in err


def test_unopenable_sqlite_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A SQLite path in a folder that does not exist is one line too."""
    url = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'x.sqlite'}"
    err = assert_one_line_failure(*run_cli(capsys, "migrate", "--database-url", url))
    assert "unable to open database file" in err


def test_unknown_revision(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    """A revision this package does not ship is one line, exit 2."""
    err = assert_one_line_failure(
        *run_cli(capsys, "migrate", "--database-url", sqlite_url, "--revision", "9999")
    )
    assert "9999" in err


@pytest.fixture
def app_role_url(pg_url: str) -> Iterator[str]:
    """The URL of a role that may connect but may not create tables."""
    role = f"helix_cli_{uuid.uuid4().hex[:10]}"
    db = pg_url.rpartition("/")[2]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT CONNECT ON DATABASE "{db}" TO "{role}"')
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
    try:
        yield make_url(pg_url).set(username=role, password=None).render_as_string(False)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def test_role_without_ddl(capsys: pytest.CaptureFixture[str], app_role_url: str) -> None:
    """Migrating as a role that may not create tables says so in one line."""
    err = assert_one_line_failure(*run_cli(capsys, "migrate", "--database-url", app_role_url))
    assert "permission denied" in err
    assert "role that may create tables" in err


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """No command, or an unknown option, is a usage error (exit 2); --version exits 0."""
    assert main([]) == 2
    assert "migrate" in capsys.readouterr().err
    assert main(["migrate", "--no-such-option"]) == 2
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("helix-dbos ")


def test_commands_can_be_registered(capsys: pytest.CaptureFixture[str]) -> None:
    """A registered command gets its own subparser and runs through main()."""
    seen: list[str] = []

    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--name", default="world")

    def run(args: argparse.Namespace) -> int:
        seen.append(args.name)
        return 0

    register(Command("hello-test", "say hello", configure, run))
    try:
        assert "hello-test" in build_parser().format_help()
        assert main(["hello-test", "--name", "helix"]) == 0
        assert seen == ["helix"]
    finally:
        del _commands["hello-test"]


def test_console_script(tmp_path: Path, sqlite_url: str) -> None:
    """The installed helix-dbos script migrates, and fails without a traceback."""
    script = shutil.which("helix-dbos", path=str(Path(sys.executable).parent))
    assert script is not None
    env = {**os.environ, "HELIX_DATABASE_URL": sqlite_url}
    done = subprocess.run([script, "migrate"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert head_revision() in done.stdout
    env["HELIX_DATABASE_URL"] = "postgresql://app:hunter2@127.0.0.1:1/app"
    done = subprocess.run([script, "migrate"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


def test_migrated_by_cli_matches_upgrade(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The CLI and upgrade() leave the same revision."""
    a, b = f"sqlite:///{tmp_path / 'a.sqlite'}", f"sqlite:///{tmp_path / 'b.sqlite'}"
    assert run_cli(capsys, "migrate", "--database-url", a)[0] == 0
    upgrade(b)
    assert current_revision(a) == current_revision(b) == head_revision()
