"""``helix-dbos approvals``, kept importable by this path: the command is
``helix_dbos.cli.approvals``."""

from __future__ import annotations

from .cli.approvals import parse_duration, parse_instant, render_approvals

__all__ = ["parse_duration", "parse_instant", "render_approvals"]
