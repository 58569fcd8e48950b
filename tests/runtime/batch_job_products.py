"""What each batch job a submit started did: its ``Continued`` (the results commit's result and
the next model step it started, if any), recorded as the job ends."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from helix_dbos.runtime._handover import BatchJobs, Continued, ParkedBatch


def job_products(monkeypatch: pytest.MonkeyPatch) -> list[Continued]:
    """What each job a submit started (``BatchJobs.start``) did, in the order the jobs ended."""
    products: list[Continued] = []
    original = BatchJobs.start

    def start(
        jobs: BatchJobs,
        live_workflow_id: str,
        job_of: Callable[[ParkedBatch], Coroutine[Any, Any, Continued]],
    ) -> bool:
        async def recorded(batch: ParkedBatch) -> Continued:
            continued = await job_of(batch)
            products.append(continued)
            return continued

        return original(jobs, live_workflow_id, recorded)

    monkeypatch.setattr(BatchJobs, "start", start)
    return products
