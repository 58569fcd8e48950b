"""Which database the operator commands read, and what they say when it is not there.

``helix-dbos sessions`` run where the demo ran (``scripts/demo`` keeps its sessions in
``demo.sqlite``) finds the demo's file when nothing chose a database; a SQLite file that does not
exist is one line naming the URL, the file it looked for and how to point the CLI elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helix_dbos.cli import main
from helix_dbos.core.session import SessionState
from helix_dbos.store.store import SessionStore


@pytest.fixture(autouse=True)
def _in_empty_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HELIX_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)


def _database_with_one_session(url: str, session_id: str) -> None:
    """A migrated SQLite file holding one idle session."""
    assert main(["migrate", "--database-url", url]) == 0

    async def add() -> None:
        store = SessionStore.from_url(url)
        try:
            await store.create_session(
                SessionState(session_id=session_id, agent_type="editor", root_session_id=session_id)
            )
        finally:
            await store.close()

    asyncio.run(add())


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_the_missing_default_names_the_url_the_file_and_the_way_elsewhere(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["sessions"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    err = _one_line(err)
    assert err.startswith("helix-dbos sessions: no SQLite database at sqlite:///helix.sqlite")
    assert str(tmp_path / "helix.sqlite") in err  # the file, resolved from the working directory
    assert "--database-url sqlite:///demo.sqlite" in err
    assert "HELIX_DATABASE_URL" in err


def test_a_missing_file_named_by_the_option_or_the_environment_says_which(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _database_with_one_session("sqlite:///demo.sqlite", "ses_demo")  # not a fallback here
    capsys.readouterr()
    assert main(["sessions", "--database-url", "sqlite:///other.sqlite"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "no SQLite database at sqlite:///other.sqlite (from --database-url" in err
    assert str(tmp_path / "other.sqlite") in err

    monkeypatch.setenv("HELIX_DATABASE_URL", "sqlite:///typo.sqlite")
    assert main(["inspect", "ses_demo"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "no SQLite database at sqlite:///typo.sqlite (from HELIX_DATABASE_URL" in err
    assert not (tmp_path / "other.sqlite").exists() and not (tmp_path / "typo.sqlite").exists()


def test_the_demos_database_is_read_when_nothing_chose_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _database_with_one_session("sqlite:///demo.sqlite", "ses_demo")
    capsys.readouterr()

    assert main(["sessions", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [row["sessionId"] for row in json.loads(out)] == ["ses_demo"]
    err = _one_line(err)  # a note on stderr: stdout stays the JSON alone
    assert err.startswith("helix-dbos sessions: using sqlite:///demo.sqlite")
    assert "--database-url" in err and "HELIX_DATABASE_URL" in err
    assert main(["inspect", "ses_demo"]) == 0
    assert "session   ses_demo" in capsys.readouterr().out
    assert not (tmp_path / "helix.sqlite").exists()  # nothing was created on the way


def test_the_default_file_wins_over_the_demos_when_both_exist(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _database_with_one_session("sqlite:///demo.sqlite", "ses_demo")
    _database_with_one_session("sqlite:///helix.sqlite", "ses_default")
    capsys.readouterr()
    assert main(["sessions", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [row["sessionId"] for row in json.loads(out)] == ["ses_default"]
    assert err == ""


def test_migrate_follows_the_same_rule_as_the_readers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Run where only the demo's file is, ``migrate`` migrates it (and says so): it creates no
    empty ``helix.sqlite`` that every later ``sessions`` would read instead."""
    _database_with_one_session("sqlite:///demo.sqlite", "ses_demo")
    capsys.readouterr()
    assert main(["migrate"]) == 0
    out, err = capsys.readouterr()
    assert "in sqlite:///demo.sqlite" in out
    assert _one_line(err).startswith("helix-dbos migrate: using sqlite:///demo.sqlite")
    assert not (tmp_path / "helix.sqlite").exists()
    assert main(["sessions", "--json"]) == 0
    assert [row["sessionId"] for row in json.loads(capsys.readouterr().out)] == ["ses_demo"]


def test_migrate_in_an_empty_directory_creates_the_default_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["migrate"]) == 0
    out, err = capsys.readouterr()
    assert "in sqlite:///helix.sqlite" in out and err == ""
    assert (tmp_path / "helix.sqlite").exists()


def test_serve_follows_the_same_rule(tmp_path: Path) -> None:
    """``serve`` with no ``HELIX_DATABASE_URL`` where only the demo's file is says it uses it
    (here the port is taken, so it stops right after, before touching the database)."""
    _database_with_one_session("sqlite:///demo.sqlite", "ses_demo")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELIX_", "DBOS_"))}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "helix_dbos.cli", "serve", "--allow-unauthenticated"]
            + ["--port", str(port)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    first, second = done.stderr.strip().splitlines()
    assert first.startswith("helix-dbos serve: using sqlite:///demo.sqlite, the demo's database")
    assert second.startswith("helix-dbos serve: ") and str(port) in second
    assert not (tmp_path / "helix.sqlite").exists()
