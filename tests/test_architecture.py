"""ARCHITECTURE.md stays true: every module and test it names exists, and it maps every module."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT = (ROOT / "ARCHITECTURE.md").read_text()

#: ``helix_dbos/...`` files or folders, and ``tests/...py`` with an optional ``::test``.
MODULE = re.compile(r"`(helix_dbos/[\w/]*(?:\.py)?)`")
TEST = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`")


def test_every_named_module_exists() -> None:
    """Every ``helix_dbos/...`` path in ARCHITECTURE.md is a file or folder of the package."""
    named = MODULE.findall(TEXT)
    assert len(named) > 30
    missing = [path for path in named if not (ROOT / path).exists()]
    assert missing == []


def test_every_named_test_exists() -> None:
    """Every guard test it points at exists, down to the test function."""
    named = TEST.findall(TEXT)
    assert len(named) >= 10
    missing = []
    for path, function in named:
        file = ROOT / path
        if not file.is_file():
            missing.append(path)
        elif function and not re.search(rf"^(async )?def {function}\(", file.read_text(), re.M):
            missing.append(f"{path}::{function}")
    assert missing == []


def test_every_invariant_points_at_a_test() -> None:
    """Each numbered invariant names at least one guard test."""
    section = TEXT.split("## Invariants", 1)[1]
    rules = re.split(r"\n(?=\d+\. \*\*)", section)[1:]
    assert len(rules) >= 5
    for rule in rules:
        assert TEST.search(rule), rule.splitlines()[0]


def test_the_module_map_covers_every_module() -> None:
    """A module added to the package gets a line in the map (or its folder has one)."""
    named = set(MODULE.findall(TEXT))
    package = ROOT / "helix_dbos"
    unmapped = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if path.name == "__init__.py" or path.name.startswith("_"):
            continue
        folders = {
            p.relative_to(ROOT).as_posix() + "/" for p in path.parents if p.is_relative_to(package)
        }
        if relative not in named and not folders & named:
            unmapped.append(relative)
    assert unmapped == []
