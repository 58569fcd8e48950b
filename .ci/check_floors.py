"""Check that .ci/floors.txt pins every runtime dependency at pyproject.toml's lower bound, and
that the running environment has exactly those versions installed.

    python .ci/check_floors.py .ci/floors.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def floors(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            pins[name.strip().lower()] = pinned.strip()
    return pins


def lower_bounds() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    bounds = {}
    for requirement in project["dependencies"]:
        match = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([^,;\s]+)", requirement)
        if match is None:
            raise SystemExit(f"{requirement!r} has no lower bound")
        bounds[match.group(1).lower()] = match.group(2)
    return bounds


def main() -> int:
    pins = floors(Path(sys.argv[1]))
    problems = []
    for name, bound in lower_bounds().items():
        if pins.get(name) != bound and pins.get(name) != f"{bound}.0":
            problems.append(f"{name}: pyproject says >={bound}, floors.txt pins {pins.get(name)}")
    for name, pinned in pins.items():
        installed = version(name)
        if installed != pinned:
            problems.append(f"{name}: {installed} installed, {pinned} pinned")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
