"""The README's Python example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs(tmp_path: Path) -> None:
    """The 'Use it from Python' block completes a client-tool round trip on SQLite."""
    match = re.search(r"## Use it from Python\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert match is not None
    script = tmp_path / "example.py"
    script.write_text(match.group(1))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "completed"
