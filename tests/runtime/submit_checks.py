"""What the tests of a submit's checks (``runtime/_submit/checks.py``) hand them: a context
that holds only what the checks read, and a pending call to answer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from helix_dbos.core.session import PendingCall


def checks_context(limit: int = 64, scrubber: Any = None) -> Any:
    """A runtime context as the checks read it: the size limit of a result, and the scrubber."""
    return SimpleNamespace(settings=SimpleNamespace(max_result_bytes=limit), scrubber=scrubber)


def pending_call(kind: str = "client", **fields: Any) -> PendingCall:
    """Call ``t1`` of run ``r1``, the tool ``edit`` with input ``{"text": "x"}``, of ``kind``."""
    return PendingCall(
        tool_call_id="t1",
        tool_name="edit",
        input={"text": "x"},
        run_id="r1",
        kind=kind,
        index=0,
        deadline_at=10**13,
        registered_at=0,
        completed_retention_ms=1000,
        **fields,
    )
