"""Import layering: the pure layers never pull in the engine, the database or the web stack."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Imported only by the store, the runtime, the HTTP layer and the CLI.
HEAVY = ("dbos", "sqlalchemy", "fastapi", "starlette", "alembic", "psycopg", "aiosqlite")


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


@pytest.mark.parametrize(
    "module",
    [
        "helix_dbos.core",
        "helix_dbos.llm",
        "helix_dbos.errors",
        "helix_dbos.config",
        "helix_dbos.observability.log",
    ],
)
def test_pure_layers_import_no_heavy_package(module: str) -> None:
    """Importing core, llm, errors or config loads none of dbos, sqlalchemy, fastapi, ..."""
    loaded = imported_after(module)
    assert "helix_dbos" in loaded
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_the_check_can_see_a_heavy_import() -> None:
    """The store does import SQLAlchemy: the probe above would notice such an import."""
    assert "sqlalchemy" in imported_after("helix_dbos.store.store")
