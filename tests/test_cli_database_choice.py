"""Which database the operator commands read, and what they say when it is not there.

``helix-dbos sessions`` run where the demo ran (``scripts/demo`` keeps its sessions in
``demo.sqlite``) finds the demo's file when nothing chose a database; a SQLite file that does not
exist is one line naming the URL, the file it looked for and how to point the CLI elsewhere.
"""

from __future__ import annotations

import asyncio
import json
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
