"""The wheel ships the Alembic scripts, and an installed package can migrate itself."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: What a build never needs from the checkout.
NOT_SOURCES = shutil.ignore_patterns(
    ".git",
    ".venv",
    "venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "*.sqlite*",
    "tests",
    "bench",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the checkout (the checkout itself is left untouched)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(source)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    [built] = (work / "dist").glob("helix_dbos-*.whl")
    return built


def test_wheel_contains_the_alembic_scripts(wheel: Path) -> None:
    """env.py, script.py.mako, every revision and py.typed are in the wheel, under helix_dbos/."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "helix_dbos/_alembic/env.py" in names
    assert "helix_dbos/_alembic/script.py.mako" in names
    assert "helix_dbos/py.typed" in names
    assert "helix_dbos/_alembic_types.py" in names
    revisions = sorted(p.name for p in (ROOT / "alembic" / "versions").glob("0*.py"))
    assert len(revisions) >= 6
    shipped = sorted(
        n.rsplit("/", 1)[1]
        for n in names
        if n.startswith("helix_dbos/_alembic/versions/") and n.endswith(".py")
    )
    assert shipped == revisions
    # Nothing at the top level but our package: a top-level alembic/ would shadow the library.
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"helix_dbos"}


def test_wheel_ships_every_module_of_the_package(wheel: Path) -> None:
    """Every module under helix_dbos/ is in the wheel (a new subpackage is listed in
    pyproject.toml's packages, or the installed package misses it)."""
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "helix_dbos").rglob("*.py")}
    assert sorted(sources - names) == []


def test_wheel_ships_the_demo_page(wheel: Path) -> None:
    """The demo page's HTML, script and stylesheet are package data: no build step needed."""
    names = set(zipfile.ZipFile(wheel).namelist())
    static = "helix_dbos/http/demo_page/static/"
    sources = sorted(p.name for p in (ROOT / static).iterdir())
    assert sources == [
        "approvals.css",
        "approvals.html",
        "approvals.js",
        "demo.css",
        "demo.js",
        "index.html",
    ]
    assert {static + name for name in sources} <= names
    assert "helix_dbos/http/demo_page/__init__.py" in names


def test_wheel_declares_the_cli(wheel: Path) -> None:
    """The helix-dbos console script points at helix_dbos.cli:main."""
    archive = zipfile.ZipFile(wheel)
    [entry_points] = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = archive.read(entry_points).decode()
    assert "helix-dbos = helix_dbos.cli:main" in text


def test_unpacked_wheel_migrates_itself(wheel: Path, tmp_path: Path) -> None:
    """Imported from the unpacked wheel, script_location() finds _alembic and upgrade works."""
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    database = tmp_path / "app.sqlite"
    script = textwrap.dedent(
        f"""
        import json
        import helix_dbos
        from helix_dbos.store.migrate import (
            head_revision, require_current_schema, script_location, upgrade,
        )
        url = {f"sqlite:///{database}"!r}
        revision = upgrade(url)
        require_current_schema(url)
        print(json.dumps({{
            "package": helix_dbos.__file__,
            "scripts": str(script_location()),
            "revision": revision,
            "head": head_revision(),
        }}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert Path(report["package"]).is_relative_to(unpacked)
    assert Path(report["scripts"]) == unpacked / "helix_dbos" / "_alembic"
    assert report["revision"] == report["head"]
    assert database.is_file()


def test_readme_test_command_is_what_ci_runs() -> None:
    """The README's test command is the one .ci/run executes, and the script parses."""
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash .ci/run" in readme
    command = "pytest -q -n 4 --dist loadfile"
    assert f"\n.venv/bin/{command}\n" in readme
    assert f"TEST_COMMAND=(.venv/bin/{command})" in ci
    assert '"${TEST_COMMAND[@]}"' in ci
    subprocess.run(["bash", "-n", str(ROOT / ".ci" / "run")], check=True)


def test_docker_compose_runs_the_server_on_postgres() -> None:
    """docker-compose.yml: postgres:16 and the server, which reaches it via HELIX_DATABASE_URL."""
    yaml = pytest.importorskip("yaml")
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    db, server = compose["services"]["postgres"], compose["services"]["helix"]
    assert db["image"] == "postgres:16"
    env = db["environment"]
    url = server["environment"]["HELIX_DATABASE_URL"]
    assert url == (
        f"postgresql://{env['POSTGRES_USER']}:{env['POSTGRES_PASSWORD']}"
        f"@postgres:5432/{env['POSTGRES_DB']}"
    )
    assert server["build"] == {"context": ".", "dockerfile": "Dockerfile"}
    assert "command" not in server, "the image's CMD runs the server"
    assert server["depends_on"]["postgres"]["condition"] == "service_healthy"


def _dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_the_dockerfile_installs_the_package_and_runs_a_real_cli_command() -> None:
    """What docker-compose builds: every COPY source exists, the package is pip-installed,
    and CMD (exec form) is a `helix-dbos serve` command line the CLI's parser accepts."""
    from helix_dbos.cli import build_parser

    steps = _dockerfile()
    assert steps[0][0] == "FROM" and steps[0][1].startswith("python:3.11")
    for keyword, rest in steps:
        if keyword == "COPY":
            *sources, _ = rest.split()
            assert all((ROOT / s).exists() for s in sources), rest
    copied = {rest.split()[0] for k, rest in steps if k == "COPY"}
    # Everything pyproject's packages need to build: the package and the Alembic folder.
    assert {"helix_dbos", "alembic"} <= copied
    assert any(k == "RUN" and "pip install ." in rest for k, rest in steps)
    (cmd,) = [json.loads(rest) for k, rest in steps if k == "CMD"]
    assert cmd[:2] == ["helix-dbos", "serve"]
    args = build_parser().parse_args(cmd[1:])
    assert (args.command, args.host, args.port) == ("serve", "0.0.0.0", 8000)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["helix-dbos"] == "helix_dbos.cli:main"
