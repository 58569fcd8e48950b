"""The size and complexity ratchet (scripts/check_size.py) on small trees, and on the package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import check_size

ROOT = Path(__file__).resolve().parent.parent


def module(root: Path, name: str, text: str) -> None:
    """Write ``helix_dbos/<name>`` under ``root``."""
    path = root / "helix_dbos" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def lines(count: int) -> str:
    """A module of ``count`` lines and no function."""
    return "".join(f"x{i} = {i}\n" for i in range(count))


def long_function(name: str, count: int) -> str:
    """A function of ``count`` lines (its ``def`` included), complexity 1."""
    return f"def {name}():\n" + "".join(f"    y{i} = {i}\n" for i in range(count - 1))


def branchy_function(name: str, complexity: int) -> str:
    """A short function of the given cyclomatic complexity (one ``if`` adds one)."""
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(complexity - 1))
    return f"def {name}(x):\n{body}    return -1\n"


def check(root: Path, baseline: check_size.Measures | None = None) -> check_size.Report:
    return check_size.compare(check_size.measure(root), baseline or {})


def test_the_limits_are_the_documented_ones() -> None:
    assert {limit.kind: limit.most for limit in check_size.LIMITS} == {
        "module_lines": 1000,
        "function_lines": 80,
        "complexity": 15,
    }


def test_a_new_oversized_module_fails(tmp_path: Path) -> None:
    module(tmp_path, "fits.py", lines(1000))
    assert check(tmp_path).failures == []
    module(tmp_path, "core/big.py", lines(1001))
    assert check(tmp_path).failures == [
        "helix_dbos/core/big.py: 1001 lines, over the limit of 1000"
    ]


def test_a_new_long_function_fails(tmp_path: Path) -> None:
    module(tmp_path, "a.py", long_function("fits", 80) + "\n\n" + long_function("long", 81))
    assert check(tmp_path).failures == ["helix_dbos/a.py:long: 81 lines, over the limit of 80"]


def test_a_new_complex_function_fails(tmp_path: Path) -> None:
    module(
        tmp_path, "a.py", branchy_function("fits", 15) + "\n\n" + branchy_function("tangled", 16)
    )
    assert check(tmp_path).failures == [
        "helix_dbos/a.py:tangled: 16 cyclomatic complexity, over the limit of 15"
    ]


def test_functions_are_named_by_module_and_qualified_name(tmp_path: Path) -> None:
    text = (
        "import functools\n\n"
        "class Outer:\n"
        "    @functools.cache\n"
        "    @staticmethod\n"
        "    def method():\n"
        "        def inner():\n"
        "            return 1\n"
        "        return inner\n\n"
        "if True:\n"
        "    async def later():\n"
        "        class Local:\n"
        "            def run(self):\n"
        "                return 2\n"
        "        return Local\n"
    )
    module(tmp_path, "names.py", text)
    measured = check_size.measure(tmp_path)["function_lines"]
    assert measured == {
        "helix_dbos/names.py:Outer.method": 6,  # from its first decorator
        "helix_dbos/names.py:Outer.method.inner": 2,
        "helix_dbos/names.py:later": 5,
        "helix_dbos/names.py:later.Local.run": 2,
    }


def test_a_baseline_entry_that_grew_fails(tmp_path: Path) -> None:
    module(tmp_path, "big.py", lines(1120))
    module(tmp_path, "f.py", branchy_function("tangled", 19))
    baseline = {
        "module_lines": {"helix_dbos/big.py": 1100},
        "complexity": {"helix_dbos/f.py:tangled": 18},
    }
    assert check(tmp_path, baseline).failures == [
        "helix_dbos/big.py: 1120 lines, grown past its baseline of 1100 (the limit is 1000)",
        "helix_dbos/f.py:tangled: 19 cyclomatic complexity, grown past its baseline of 18"
        " (the limit is 15)",
    ]


def test_a_baseline_entry_that_shrank_passes_with_a_note(tmp_path: Path) -> None:
    module(tmp_path, "big.py", lines(1080))
    module(tmp_path, "f.py", long_function("long", 70))
    baseline = {
        "module_lines": {"helix_dbos/big.py": 1100, "helix_dbos/f.py": 70},
        "function_lines": {"helix_dbos/f.py:long": 90},
    }
    report = check(tmp_path, baseline)
    assert report.failures == []
    assert report.notes == [
        "helix_dbos/big.py: 1080 lines, down from its baseline of 1100; --update records it",
        "helix_dbos/f.py: 70 lines, within the limit now; --update drops it",
        "helix_dbos/f.py:long: 70 lines, within the limit now; --update drops it",
    ]


def test_an_entry_at_its_recorded_measure_passes_quietly(tmp_path: Path) -> None:
    module(tmp_path, "big.py", lines(1100))
    report = check(tmp_path, {"module_lines": {"helix_dbos/big.py": 1100}})
    assert (report.failures, report.notes) == ([], [])


def test_a_stale_entry_fails(tmp_path: Path) -> None:
    module(tmp_path, "a.py", lines(10))
    baseline = {
        "module_lines": {"helix_dbos/gone.py": 700},
        "complexity": {"helix_dbos/a.py:split_up": 20},
        "nesting": {"helix_dbos/a.py": 3},
    }
    assert check(tmp_path, baseline).failures == [
        "the baseline has an unknown kind 'nesting'",
        "helix_dbos/gone.py: in the baseline (module_lines) but gone; --update drops it",
        "helix_dbos/a.py:split_up: in the baseline (complexity) but gone; --update drops it",
    ]


def write_baseline(root: Path, baseline: check_size.Measures) -> Path:
    path = root / check_size.BASELINE
    check_size.dump(path, baseline)
    return path


def test_update_shrinks_and_drops_entries_and_never_adds(tmp_path: Path) -> None:
    module(tmp_path, "grown.py", lines(1150))
    module(tmp_path, "shrunk.py", lines(1050))
    module(tmp_path, "fixed.py", lines(100))
    module(tmp_path, "new.py", lines(1400) + long_function("new_long", 90))
    path = write_baseline(
        tmp_path,
        {
            "module_lines": {
                "helix_dbos/grown.py": 1100,
                "helix_dbos/shrunk.py": 1100,
                "helix_dbos/fixed.py": 1100,
                "helix_dbos/gone.py": 1100,
            },
        },
    )
    assert check_size.main(["--update"], root=tmp_path) == 1
    assert check_size.load(path) == {
        "module_lines": {"helix_dbos/grown.py": 1100, "helix_dbos/shrunk.py": 1050},
        "function_lines": {},
        "complexity": {},
    }
    # What is left is what --update refuses to write down: the growth and the new offenders.
    assert check(tmp_path, check_size.load(path)).failures == [
        "helix_dbos/grown.py: 1150 lines, grown past its baseline of 1100 (the limit is 1000)",
        "helix_dbos/new.py: 1490 lines, over the limit of 1000",
        "helix_dbos/new.py:new_long: 90 lines, over the limit of 80",
    ]


def test_update_of_a_clean_tree_passes_and_the_check_then_passes(tmp_path: Path) -> None:
    module(tmp_path, "shrunk.py", lines(1050))
    path = write_baseline(tmp_path, {"module_lines": {"helix_dbos/shrunk.py": 1100}})
    assert check_size.main([], root=tmp_path) == 0
    assert check_size.main(["--update"], root=tmp_path) == 0
    assert check_size.load(path)["module_lines"] == {"helix_dbos/shrunk.py": 1050}
    assert check(tmp_path, check_size.load(path)).notes == []


def test_init_lists_the_offenders_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module(tmp_path, "big.py", lines(1001) + branchy_function("tangled", 16))
    assert check_size.main(["--init"], root=tmp_path) == 0
    path = tmp_path / check_size.BASELINE
    assert json.loads(path.read_text()) == {
        "complexity": {"helix_dbos/big.py:tangled": 16},
        "function_lines": {},
        "module_lines": {"helix_dbos/big.py": 1033},
    }
    assert check_size.main(["--init"], root=tmp_path) == 1
    assert "--init writes only the first baseline" in capsys.readouterr().err


def test_the_package_passes_against_the_committed_baseline() -> None:
    """helix_dbos/ keeps to its limits, or to what .ci/size_baseline.json records (nothing,
    since every module and function came within them: the ratchet only shrinks)."""
    baseline = check_size.load(ROOT / check_size.BASELINE)
    report = check_size.compare(check_size.measure(ROOT), baseline)
    assert report.failures == []
    assert sum(len(entries) for entries in baseline.values()) == 0
