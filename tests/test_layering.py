"""Import layering: what the import contracts cannot say.

The layers of the package and of the runtime's rooms, the rooms kept apart, the absence of
import cycles and where each heavy package may be imported are import-linter contracts
(pyproject.toml's ``[tool.importlinter]``, the ``import contracts`` step of .ci/run). A contract
reads the code; what is left here runs it: a fresh interpreter imports the pure layers and looks
at what got loaded, so a heavy package pulled in at run time (``importlib``, the package root's
lazy names) is caught too. And every room of the runtime says what it owns and what it may
import.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "helix_dbos"

#: The engine, the database and the web stack.
HEAVY = ("dbos", "sqlalchemy", "fastapi", "starlette", "alembic", "psycopg", "aiosqlite")


#: The layers that load no heavy package at all, imported in a fresh interpreter.
PURE = [
    "helix_dbos.core",
    "helix_dbos.llm",
    "helix_dbos.errors",
    "helix_dbos.config",
    "helix_dbos.observability.log",
]


def imported_after(module: str) -> set[str]:
    """The top-level packages in sys.modules after importing ``module`` in a fresh interpreter."""
    code = (
        "import importlib, json, sys\n"
        f"importlib.import_module({module!r})\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return set(json.loads(out))


@pytest.mark.parametrize("module", PURE)
def test_pure_layers_import_no_heavy_package(module: str) -> None:
    """Importing core, llm, errors or config loads none of dbos, sqlalchemy, fastapi, ..."""
    loaded = imported_after(module)
    assert "helix_dbos" in loaded
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_the_check_can_see_a_heavy_import() -> None:
    """The store does import SQLAlchemy: the probe above would notice such an import."""
    assert "sqlalchemy" in imported_after("helix_dbos.store.store")


def test_settings_are_built_without_the_engine() -> None:
    """``HelixSettings()`` with every setting left empty (the application version defaults
    to the contract's) loads none of dbos, sqlalchemy, fastapi, ... (it used to import the
    runtime package for the contract's version, and with it DBOS)."""
    code = (
        "import json, sys\n"
        "from helix_dbos.config import HelixSettings\n"
        "s = HelixSettings(database_url='sqlite:///x.sqlite')\n"
        "assert s.application_version\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    loaded = set(json.loads(out))
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


ROOMS = sorted(p.parent for p in (PACKAGE / "runtime").glob("*/__init__.py"))


@pytest.mark.parametrize("room", ROOMS, ids=lambda p: p.name)
def test_every_room_says_what_it_owns_and_may_import(room: Path) -> None:
    """A room's ``__init__`` is its docstring alone: what the room owns, and ``May import:``."""
    tree = ast.parse((room / "__init__.py").read_text())
    doc = ast.get_docstring(tree)
    assert doc is not None and "May import:" in doc, room.name
    assert len(tree.body) == 1, f"{room.name}/__init__.py holds more than its docstring"


def test_the_rooms_are_the_contract_s() -> None:
    """The runtime's rooms are exactly the packages its layers contract places."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "runtime-rooms"]
    placed = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    assert {room.name for room in ROOMS} <= placed
