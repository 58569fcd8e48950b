"""The README's Python examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from .doc_snippets import assert_logged_turn, block_under, program_env, served, token_round_trip

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs(tmp_path: Path) -> None:
    """The 'Use it from Python' block completes a client-tool round trip on SQLite."""
    match = re.search(r"## Use it from Python\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert match is not None
    script = tmp_path / "example.py"
    script.write_text(match.group(1))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "completed"
    # Its own file: run in the checkout, it never opens the demo's (and its parked turns).
    assert "demo.sqlite" not in match.group(1)
    assert (tmp_path / "example.sqlite").exists()
    assert done.stderr == "", done.stderr  # nothing to warn about on a file of its own


def test_readme_fastapi_app_serves_and_logs_a_turn(tmp_path: Path) -> None:
    """The 'Embedding in FastAPI' block, served by ``uvicorn app:app`` as the README says:
    a /agents/start round trip with its token, and helix-dbos's event line of the turn in the
    server's output (next to uvicorn's)."""
    with served(block_under(README, "Embedding in FastAPI"), tmp_path) as app:
        sid = token_round_trip(app.client)
    output = app.output()
    assert_logged_turn(output, sid)
    assert "Application startup complete" in output  # uvicorn's own lines are there too


def test_readme_fastapi_app_names_a_missing_secret(tmp_path: Path) -> None:
    """Without HELIX_AUTH_SECRET the app refuses to load, saying which variable to set."""
    (tmp_path / "app.py").write_text(block_under(README, "Embedding in FastAPI"))
    env = program_env(tmp_path)
    del env["HELIX_AUTH_SECRET"]
    done = subprocess.run(
        [sys.executable, "-c", "import app"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "Set HELIX_AUTH_SECRET" in done.stderr


def test_readme_lists_every_docs_page_once() -> None:
    """The Documentation list names each page of docs/ exactly once, and only pages that exist."""
    section = README.read_text().split("\n## Documentation\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"\]\((docs/[^)#]+\.md)\)", section)
    assert sorted(listed) == sorted(set(listed)), "a page is listed twice"
    pages = sorted(p.relative_to(README.parent).as_posix() for p in README.parent.glob("docs/*.md"))
    assert sorted(listed) == pages


def test_readme_fastapi_app_that_cannot_start_says_why_briefly(tmp_path: Path) -> None:
    """A database that cannot be opened (a SQLite file in a folder that does not exist): the
    app's startup failure is one ``runtime.start_failed`` line and a few frames of uvicorn's,
    not the driver's forty-frame traceback."""
    (tmp_path / "app.py").write_text(block_under(README, "Embedding in FastAPI"))
    missing = f"sqlite:///{tmp_path / 'helix_missing_folder' / 'app.sqlite'}"
    env = program_env(tmp_path, HELIX_DATABASE_URL=missing)
    done = subprocess.run(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    (failed,) = [line for line in lines if "runtime.start_failed" in line]
    assert "helix_missing_folder" in failed and "unable to open database file" in failed
    assert len(lines) < 30, done.stderr
    assert "sqlalchemy" not in done.stderr and "aiosqlite" not in done.stderr
