"""The SQL of docs/runbook.md, read from the markdown itself, so tests run what operators read.

Each ``sql`` / ``sqlite`` block of the runbook is named by the ``<!-- sql: name -->`` comment
above it.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["RUNBOOK", "runbook_sql"]

RUNBOOK = Path(__file__).resolve().parents[1] / "docs" / "runbook.md"

_BLOCK = re.compile(
    r"<!-- sql: (?P<name>[\w-]+) -->\n```(?P<lang>sql|sqlite)\n(?P<body>.*?)```", re.DOTALL
)


def runbook_sql() -> dict[str, tuple[str, str]]:
    """``name -> (language, statement)`` for every SQL block of the runbook."""
    text = RUNBOOK.read_text()
    blocks = {m["name"]: (m["lang"], m["body"].strip()) for m in _BLOCK.finditer(text)}
    fences = len(re.findall(r"^```(?:sql|sqlite)$", text, re.MULTILINE))
    assert fences == len(blocks), "every sql block of the runbook needs a <!-- sql: name -->"
    return blocks
