"""`load_agents` (serve's APP): a module whose import fails says the file and line it failed at,
and an object that is not agents is named with its article."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from helix_dbos.errors import ConfigError
from helix_dbos.loader import load_agents


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working directory of its own; the modules imported from it are forgotten after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_an_import_error_names_the_file_and_line_it_was_raised_at(workdir: Path) -> None:
    """The error is raised two modules deep: the line names the helper's file, line and
    function, not only the module APP names."""
    app, helper = _name("broken"), _name("helper")
    (workdir / f"{app}.py").write_text(f"import {helper}\nagents = []\n")
    (workdir / f"{helper}.py").write_text(
        'def deep():\n    raise RuntimeError("boom deep")\n\n\ndeep()\n'
    )
    with pytest.raises(ConfigError) as info:
        load_agents(f"{app}:agents")
    assert info.value.message == (
        f"Importing '{app}' failed at {helper}.py:2 (in deep): RuntimeError: boom deep"
    )


def test_a_syntax_error_names_its_file_and_line(workdir: Path) -> None:
    app = _name("syntax")
    (workdir / f"{app}.py").write_text("agents = []\n\ndef broken(:\n    pass\n")
    with pytest.raises(ConfigError) as info:
        load_agents(f"{app}:agents")
    assert info.value.message.startswith(f"Importing '{app}' failed at {app}.py:3: SyntaxError")


def test_an_object_that_is_not_agents_is_named_with_its_article(workdir: Path) -> None:
    app = _name("numbers")
    (workdir / f"{app}.py").write_text("agents = 5\nother = {}\n")
    with pytest.raises(ConfigError, match=r"is an int: expected an Agent"):
        load_agents(f"{app}:agents")
    with pytest.raises(ConfigError, match=r"is a dict: expected an Agent"):
        load_agents(f"{app}:other")
