"""No test module imports another: what tests share lives in ``tests/support/`` or in a helper
module beside them, so that one test module never depends on another one's tests."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(source: str, package: str) -> list[str]:
    """The test modules (``test_*``) of ``tests`` that ``source``, a module of ``package``,
    imports: relative imports resolved, those inside functions too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            found += [module, *(f"{module}.{alias.name}" for alias in node.names)]
    return [m for m in found if m.startswith("tests.") and m.split(".")[-1].startswith("test_")]


def test_no_test_module_imports_another() -> None:
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        package = ".".join(path.relative_to(TESTS.parent).parent.parts)
        if imported := imported_test_modules(path.read_text(), package):
            found[str(path.relative_to(TESTS))] = imported
    assert found == {}


def test_the_check_sees_absolute_relative_and_inner_imports() -> None:
    source = (
        "from tests.runtime.test_interrupt import parked\n"
        "from .test_approvals import banker\n"
        "def f() -> None:\n"
        "    from ..http import test_chat\n"
        "    import tests.serve.test_serve\n"
        "from tests.support.asker import asker\n"
        "from . import agents\n"
    )
    assert imported_test_modules(source, "tests.runtime") == [
        "tests.runtime.test_interrupt",
        "tests.runtime.test_approvals",
        "tests.http.test_chat",
        "tests.serve.test_serve",
    ]
