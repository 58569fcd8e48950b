"""Size and complexity limits of the package, held by a ratchet.

    python scripts/check_size.py            check helix_dbos/ against the baseline
    python scripts/check_size.py --update   tighten the baseline: shrink or drop entries, never add
    python scripts/check_size.py --init     write the first baseline (only when there is none)

The limits: a module of at most 1,000 lines (a guard against the sprawling module: a module is
one idea, and is never split to meet the number), a function (or method) of at most 80 lines, and a
function of cyclomatic complexity at most 15 (radon's measure). Code that broke a limit when the
check came in is listed in ``.ci/size_baseline.json`` with its measure then. The check fails
when code not listed breaks a limit, when a listed entry grows past its recorded measure, or when
a listed entry no longer exists (a stale entry). A listed entry that shrank is reported, so the
baseline can be tightened with ``--update``.

Names: a module by its path (``helix_dbos/store/store.py``), a function by its module and
qualified name (``helix_dbos/store/store.py:Class.method``, a nested function as
``outer.inner``). A function's lines run from its ``def`` (or its first decorator) to its last
line. Two definitions with one name (a property's getter and setter) are measured as one, by the
larger.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from radon.visitors import ComplexityVisitor

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "helix_dbos"
BASELINE = Path(".ci") / "size_baseline.json"

#: kind -> name -> measure; the baseline has the same shape.
Measures = dict[str, dict[str, int]]
Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Limit:
    """One limit: the baseline's key for it, what it counts, and the most it allows."""

    kind: str
    unit: str
    most: int


LIMITS = (
    Limit("module_lines", "lines", 1000),
    Limit("function_lines", "lines", 80),
    Limit("complexity", "cyclomatic complexity", 15),
)


@dataclass
class Report:
    """What a check found: failures fail it, notes say where the baseline can be tightened."""

    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def functions(tree: ast.AST, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, Function]]:
    """Every function under ``tree`` with its qualified name (classes and functions nest)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield ".".join((*prefix, node.name)), node
            yield from functions(node, (*prefix, node.name))
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, (*prefix, node.name))
        else:
            # A definition inside an if, a try or a with block.
            yield from functions(node, prefix)


def function_lines(node: Function) -> int:
    """A function's lines, from its first decorator (or ``def``) to its last line."""
    first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
    last = node.end_lineno or node.lineno
    return last - first + 1


def complexity(node: Function) -> int:
    """A function's cyclomatic complexity as radon counts it (its nested functions not included)."""
    visitor = ComplexityVisitor.from_ast(node)
    return int(visitor.functions[0].complexity)


def measure(root: Path) -> Measures:
    """The measures of every module and function of the package under ``root``."""
    measures: Measures = {limit.kind: {} for limit in LIMITS}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        module = path.relative_to(root).as_posix()
        source = path.read_text(encoding="utf-8")
        measures["module_lines"][module] = len(source.splitlines())
        for name, node in functions(ast.parse(source, filename=module)):
            key = f"{module}:{name}"
            for kind, value in (
                ("function_lines", function_lines(node)),
                ("complexity", complexity(node)),
            ):
                measures[kind][key] = max(value, measures[kind].get(key, 0))
    return measures


def compare(measures: Measures, baseline: Measures) -> Report:
    """Check the measures against the limits and the baseline's recorded measures."""
    report = Report()
    for kind in sorted(baseline.keys() - {limit.kind for limit in LIMITS}):
        report.failures.append(f"the baseline has an unknown kind {kind!r}")
    for limit in LIMITS:
        measured, listed = measures[limit.kind], baseline.get(limit.kind, {})
        for name, value in sorted(measured.items()):
            recorded = listed.get(name)
            if recorded is None:
                if value > limit.most:
                    report.failures.append(
                        f"{name}: {value} {limit.unit}, over the limit of {limit.most}"
                    )
            elif value > recorded:
                report.failures.append(
                    f"{name}: {value} {limit.unit}, grown past its baseline of {recorded}"
                    f" (the limit is {limit.most})"
                )
            elif value <= limit.most:
                report.notes.append(
                    f"{name}: {value} {limit.unit}, within the limit now; --update drops it"
                )
            elif value < recorded:
                report.notes.append(
                    f"{name}: {value} {limit.unit}, down from its baseline of {recorded};"
                    " --update records it"
                )
        for name in sorted(listed.keys() - measured.keys()):
            report.failures.append(
                f"{name}: in the baseline ({limit.kind}) but gone; --update drops it"
            )
    return report


def offenders(measures: Measures) -> Measures:
    """Everything that breaks a limit now, with its measure: the first baseline."""
    return {
        limit.kind: {
            name: value for name, value in measures[limit.kind].items() if value > limit.most
        }
        for limit in LIMITS
    }


def tighten(measures: Measures, baseline: Measures) -> Measures:
    """The baseline lowered to the measures: entries only shrink or go, none is added."""
    tightened: Measures = {}
    for limit in LIMITS:
        measured = measures[limit.kind]
        tightened[limit.kind] = {
            name: min(recorded, measured[name])
            for name, recorded in baseline.get(limit.kind, {}).items()
            if measured.get(name, 0) > limit.most
        }
    return tightened


def load(path: Path) -> Measures:
    """Read a baseline file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return {
        kind: {name: int(value) for name, value in entries.items()}
        for kind, entries in data.items()
    }


def dump(path: Path, baseline: Measures) -> None:
    """Write a baseline file: one entry a line, sorted, so a change reads as a plain diff."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(baseline, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def summary(baseline: Measures) -> str:
    """How many entries the baseline holds, by kind."""
    return ", ".join(f"{len(baseline.get(limit.kind, {}))} {limit.kind}" for limit in LIMITS)


def main(argv: Sequence[str] | None = None, root: Path = ROOT) -> int:
    """Run the check (or ``--update`` / ``--init``) on the package under ``root``."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--update", action="store_true", help="tighten the baseline, never add")
    mode.add_argument("--init", action="store_true", help="write the first baseline")
    args = parser.parse_args(argv)
    path = root / BASELINE
    measures = measure(root)
    if args.init:
        if path.exists():
            print(f"{BASELINE} exists; --init writes only the first baseline", file=sys.stderr)
            return 1
        dump(path, offenders(measures))
        print(f"wrote {BASELINE}: {summary(load(path))}")
        return 0
    baseline = load(path) if path.exists() else {}
    if args.update:
        baseline = tighten(measures, baseline)
        dump(path, baseline)
        print(f"wrote {BASELINE}: {summary(baseline)}")
    report = compare(measures, baseline)
    for note in report.notes:
        print(f"note: {note}")
    for failure in report.failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    if report.failures:
        print(
            f"{len(report.failures)} failure(s). Limits: "
            + ", ".join(f"{limit.kind} {limit.most}" for limit in LIMITS)
            + f". The baseline ({BASELINE}) only shrinks: split the code rather than list it.",
            file=sys.stderr,
        )
        return 1
    if report.notes:
        print("the baseline can be tightened: python scripts/check_size.py --update")
    print(f"size and complexity: ok (baseline: {summary(baseline)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
