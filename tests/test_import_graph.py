"""The import graph's figures (scripts/import_graph.py) on a small package, and on the runtime."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts import import_graph


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Path]:
    """A folder on ``sys.path`` for a package of the test's own; forgotten afterwards."""
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m == "toy" or m.startswith("toy.")]:
        del sys.modules[name]


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / "toy" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_held_apart_by_an_import_inside_a_function_is_counted(tree: Path) -> None:
    write(
        tree,
        {
            "__init__.py": "",
            "a.py": "from . import b\n",
            "b.py": "def later():\n    from . import a\n",
            "c.py": "from . import a\nfrom typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from . import d\n",
            "d.py": "from . import c\n",
        },
    )
    figures = import_graph.measure("toy")
    # a <-> b is a cycle (b's import waits in a function); c -> d is an annotation only.
    assert figures == {
        "modules": 5,
        "arrows": 4,
        "cycles": 1,
        "arrows back up": 2,
        "levels": 3,
    }


def test_the_runtime_has_no_cycle_and_no_arrow_back_up() -> None:
    figures = import_graph.measure("helix_dbos.runtime")
    assert (figures["cycles"], figures["arrows back up"]) == (0, 0)
    assert figures["modules"] > 40
