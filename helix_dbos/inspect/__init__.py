"""The operator's read model: recent sessions, and everything about one session.

``helix-dbos sessions``, ``inspect`` and ``executors`` read through it: the facts, gathered
through an :class:`~helix_dbos.runtime.Operator` with their JSON form
(``report.py``), and their text (``render.py``).
"""

from __future__ import annotations

from ..runtime import WorkflowInfo
from .render import render_executors, render_report, render_sessions
from .report import SessionReport, SessionRow, TreeNode, inspect_session, list_sessions, recoveries
from .report import hibernation_dump as hibernation_dump
from .times import span as span

__all__ = [
    "SessionReport",
    "SessionRow",
    "TreeNode",
    "WorkflowInfo",
    "inspect_session",
    "list_sessions",
    "recoveries",
    "render_executors",
    "render_report",
    "render_sessions",
]
