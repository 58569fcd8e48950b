"""The fence of a transition (``store/swap.guard``, ARCHITECTURE.md's glossary: "fence"): a row
still on the step's run, in one of the statuses the step expects, passes; any other row fails
with ``Fenced`` and the reason a step records (``records.FencedResult``)."""

from __future__ import annotations

import pytest

from helix_dbos.errors import SessionNotFoundError
from helix_dbos.store.store import SessionStore
from helix_dbos.store.swap import Fenced, NoChange, guard
from tests.store.store_builders import session

ACTIVE = ("running", "suspended_client_tool")


def test_a_row_on_the_run_in_an_expected_status_passes() -> None:
    for status in ACTIVE:
        guard(session("s", status=status, run_id="r"), "r", ACTIVE)


@pytest.mark.parametrize(
    ("status", "run_id", "reason"),
    [
        ("running", "r2", "superseded"),  # another run took the session
        ("running", None, "superseded"),
        ("interrupted", "r", "stopped"),
        ("completed", "r", "stopped"),
        ("idle", "r", "idle"),
        ("idle", "r2", "superseded"),  # the run is checked first
    ],
)
def test_any_other_row_is_fenced_with_its_reason(
    status: str, run_id: str | None, reason: str
) -> None:
    with pytest.raises(Fenced) as fenced:
        guard(session("s", status=status, run_id=run_id), "r", ACTIVE)
    assert (fenced.value.session_id, fenced.value.reason) == ("s", reason)
    # What a traceback shows if a Fenced ever escapes its step: the session and the reason.
    assert str(fenced.value) == f"s: {reason}"


def test_no_change_carries_its_value() -> None:
    assert NoChange({"hibernated": False}).value == {"hibernated": False}


async def test_an_update_of_a_missing_session_names_it(store: SessionStore) -> None:
    """An update of rows one of which does not exist writes nothing and names the missing one
    (the first missing, in the order asked)."""
    await store.create_session(session("here"))
    with pytest.raises(SessionNotFoundError) as missing:
        await store.update(["here", "gone", "also-gone"], lambda states: None)
    assert missing.value.details["sessionId"] == "gone"
    assert "'gone'" in str(missing.value)
    assert (await store.get("here")).version == 0
