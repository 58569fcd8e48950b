"""The import graph of a package of helix_dbos, in figures.

    python scripts/import_graph.py [helix_dbos.runtime]

Counts the package's modules, the arrows between them (one per importing module and imported
module, wherever the import sits: at the top, inside a function; imports under
``if TYPE_CHECKING:`` are annotations and are left out, as the import contracts leave them
out), the import cycles (groups of modules that import each other, directly or through
others), the arrows that run back up (an arrow inside such a group: it imports a module that
imports it back), and the levels (the longest chain of arrows, counting a cycle as one
module). The graph is grimp's, the one the import contracts (``lint-imports``) check.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

import grimp


def _cycles(nodes: set[str], arrows: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in arrows[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    sys.setrecursionlimit(10_000)
    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return groups


def _levels(nodes: Iterable[str], arrows: dict[str, set[str]], group_of: dict[str, int]) -> int:
    """The longest chain of arrows, in modules, with each cycle taken as one module."""
    depth: dict[str, int] = {}

    def of(node: str, seen: frozenset[str]) -> int:
        if node in depth:
            return depth[node]
        below = [
            of(target, seen | {node})
            for target in arrows[node]
            if target not in seen
            and (node not in group_of or group_of.get(target) != group_of[node])
        ]
        depth[node] = 1 + max(below, default=0)
        return depth[node]

    return max((of(node, frozenset()) for node in nodes), default=0)


def measure(package: str) -> dict[str, int]:
    """The figures of one package: modules, arrows, cycles, arrows back up, levels."""
    root = package.split(".")[0]
    graph = grimp.build_graph(root, exclude_type_checking_imports=True)
    prefix = package + "."
    # A package is a module too: its __init__ imports like any other.
    nodes = {m for m in graph.modules if m == package or m.startswith(prefix)}
    arrows = {
        m: {t for t in graph.find_modules_directly_imported_by(m) if t in nodes and t != m}
        for m in nodes
    }
    groups = _cycles(nodes, arrows)
    group_of = {member: i for i, group in enumerate(groups) for member in group}
    back_up = sum(
        1
        for m, targets in arrows.items()
        for t in targets
        if m in group_of and group_of.get(t) == group_of[m]
    )
    return {
        "modules": len(nodes),
        "arrows": sum(len(t) for t in arrows.values()),
        "cycles": len(groups),
        "arrows back up": back_up,
        "levels": _levels(nodes, arrows, group_of),
    }


if __name__ == "__main__":
    for name, value in measure(sys.argv[1] if len(sys.argv) > 1 else "helix_dbos.runtime").items():
        print(f"{name}: {value}")
