"""Import layering: each layer imports only the layers below it and only its own heavy packages.

Two checks. The static one reads every module of ``helix_dbos`` (its module-level and its
function-level imports, ``TYPE_CHECKING`` ones included) and holds it to the table below:
which third-party stacks a layer may import, and which layers of the package it may import.
The fresh-interpreter one imports the pure layers and looks at what got loaded, so a heavy
package pulled in indirectly is caught too.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "helix_dbos"

#: The engine, the database and the web stack.
HEAVY = ("dbos", "sqlalchemy", "fastapi", "starlette", "alembic", "psycopg", "aiosqlite")

#: The layers of ARCHITECTURE.md, lowest first: a module imports only its own layer and
#: lower-ranked ones (two layers of one rank import neither the other). ``allowed``: the heavy
#: packages its modules may import.
LAYERS: dict[str, tuple[int, frozenset[str]]] = {
    "core": (0, frozenset()),  # core/, errors.py, config.py: stdlib and pydantic only
    "llm": (1, frozenset()),
    "observability": (1, frozenset()),
    "kits": (2, frozenset()),  # demo.py, testing.py: the demo agents, the kit for users' tests
    "mcp": (2, frozenset()),  # mcp/: an MCP server's tools as a toolset (the ``mcp`` SDK's client)
    "store": (3, frozenset({"sqlalchemy", "alembic", "psycopg", "aiosqlite"})),
    "runtime": (4, frozenset({"dbos"})),
    "http": (5, frozenset({"fastapi", "starlette"})),
    "app": (6, frozenset()),  # the command line, its read model, the loader, the package root
}

#: The imports the table forbids that the package makes all the same, each with its reason:
#: ``(module, imported) -> why``; ``imported`` is a heavy package, or a module of the package.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("helix_dbos._alembic_types", "sqlalchemy"): (
        "the column types the Alembic revisions share: they import it by this path"
    ),
}


class Breach(NamedTuple):
    """One import the table forbids."""

    module: str
    layer: str
    imported: str
    """A heavy package (its top-level name), or a module of the package."""
    imported_layer: str | None
    """The layer of the package ``imported`` is in; ``None`` for a heavy package."""

    def __str__(self) -> str:
        where = f" ({self.imported_layer})" if self.imported_layer else ""
        return f"{self.module} ({self.layer}) imports {self.imported}{where}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str:
    """The layer a module of the package belongs to."""
    parts = module.split(".")
    if len(parts) == 1:
        return "app"  # the package root: the public API, imported lazily
    top = parts[1]
    if top in ("core", "errors", "config"):
        return "core"
    if top in ("llm", "observability", "store", "runtime", "http"):
        return top
    if top in ("demo", "testing"):
        return "kits"
    if top == "mcp":
        return "mcp"
    if top in ("cli", "cli_database", "cli_approvals", "inspect", "loader", "_alembic_types"):
        return "app"
    raise AssertionError(f"{module} is in no layer: add it to test_layering.layer_of")


def imports_of(path: Path, source: str | None = None) -> set[str]:
    """Every module ``path`` imports (or ``source``, read as that file), absolute: at module
    level and inside functions."""
    module = module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    text = path.read_text() if source is None else source
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if node.module is None:  # ``from . import x``: x is a module, or a name of base
                found.update(_submodule_or(base, alias.name) for alias in node.names)
            else:
                found.add(base)
    return found


def _submodule_or(base: str, name: str) -> str:
    """``base.name`` if that is a module of the package, else ``base``."""
    path = ROOT.joinpath(*base.split("."), name)
    return f"{base}.{name}" if path.is_dir() or path.with_suffix(".py").is_file() else base


def breaches(path: Path, source: str | None = None) -> list[Breach]:
    """The imports of ``path`` (or of ``source`` as that file) that the table forbids,
    exceptions included."""
    module = module_name(path)
    layer = layer_of(module)
    rank, allowed = LAYERS[layer]
    found = set()
    for imported in imports_of(path, source):
        top = imported.split(".")[0]
        if top in HEAVY and top not in allowed:
            found.add(Breach(module, layer, top, None))
        if top == "helix_dbos" and imported != "helix_dbos":
            # (The package root itself is not a dependency: Python loads it before any of its
            # modules, and it holds ``__version__``.)
            other = layer_of(".".join(imported.split(".")[:2]))
            if other != layer and LAYERS[other][0] >= rank:
                found.add(Breach(module, layer, imported, other))
    return sorted(found)


def all_breaches() -> list[Breach]:
    return [b for path in sorted(PACKAGE.rglob("*.py")) for b in breaches(path)]


def test_every_module_keeps_to_its_layer() -> None:
    """No module imports a heavy package its layer may not, or a layer above its own."""
    unexcused = [str(b) for b in all_breaches() if (b.module, b.imported) not in EXCEPTIONS]
    assert unexcused == []


def test_every_exception_is_still_needed() -> None:
    """An exception whose import is gone leaves the table: it must not excuse a new one."""
    found = {(b.module, b.imported) for b in all_breaches()}
    assert set(EXCEPTIONS) - found == set()


def test_the_static_check_sees_imports_in_functions() -> None:
    """The scan reads function-level and relative imports: the store's SQLAlchemy, the
    fleet's deferred DBOS import."""
    assert "sqlalchemy" in imports_of(PACKAGE / "store" / "sessions.py")
    assert "dbos" in imports_of(PACKAGE / "runtime" / "fleet.py")


def test_a_forbidden_import_is_reported() -> None:
    """A runtime module importing SQLAlchemy inside a function, the store importing the
    runtime, or the runtime the HTTP layer: each breaks a rule (the check is not blind)."""
    plan = PACKAGE / "runtime" / "plan.py"
    deferred = plan.read_text() + "\n\ndef _x() -> None:\n    import sqlalchemy.exc\n"
    assert [str(b) for b in breaches(plan, deferred)] == [
        "helix_dbos.runtime.plan (runtime) imports sqlalchemy"
    ]
    store = PACKAGE / "store" / "listing.py"
    upward = store.read_text() + "\nfrom ..runtime import names\n"
    assert [str(b) for b in breaches(store, upward)] == [
        "helix_dbos.store.listing (store) imports helix_dbos.runtime (runtime)"
    ]
    upward = plan.read_text() + "\nfrom ..http.errors import error_response\n"
    assert [str(b) for b in breaches(plan, upward)] == [
        "helix_dbos.runtime.plan (runtime) imports helix_dbos.http.errors (http)"
    ]


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
