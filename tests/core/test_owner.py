"""Who owns a session: principals and tenants as the session row records them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given

from helix_dbos.core.owner import OWNER_MAX_LENGTH, SessionOwner, checked_owner, owner_text
from helix_dbos.errors import RequestValidationError
from tests.support.strategies import json_values


def test_text_and_unset_are_kept_as_they_are() -> None:
    """A string is recorded verbatim (even one that looks like JSON), ``None`` stays unset."""
    assert owner_text(None) is None
    assert owner_text("alice") == "alice"
    assert owner_text('{"a": 1}') == '{"a": 1}'
    assert owner_text("") == ""


def test_other_values_are_canonical_json() -> None:
    """Sorted keys and no spaces, so one principal is always the same text."""
    assert owner_text({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert owner_text({"a": [1, 2], "b": 1}) == owner_text({"b": 1, "a": [1, 2]})
    assert owner_text(42) == "42"
    assert owner_text(True) == "true"


@given(json_values)
def test_canonical_json_reads_back_as_the_value(value: Any) -> None:
    """Whatever JSON principal a hook answers, its text decodes to the same value."""
    text = owner_text(value)
    if isinstance(value, str) or value is None:
        assert text == value
    else:
        assert text is not None
        assert json.loads(text) == value


def test_checked_owner_takes_unset_or_bounded_text() -> None:
    """``None`` and 1 to ``OWNER_MAX_LENGTH`` characters pass unchanged."""
    assert checked_owner(None, "principal") is None
    assert checked_owner("a", "principal") == "a"
    longest = "x" * OWNER_MAX_LENGTH
    assert checked_owner(longest, "tenant") == longest


@pytest.mark.parametrize(
    "value", ["", "x" * (OWNER_MAX_LENGTH + 1), 7, True, {"a": 1}, ["a"], "a\x00b"]
)
def test_checked_owner_refuses_anything_else(value: object) -> None:
    """Empty, too long, not a string, or holding a NUL: a typed refusal naming the field."""
    with pytest.raises(RequestValidationError) as caught:
        checked_owner(value, "tenant")
    assert caught.value.details == {"cause": "tenant"}
    assert caught.value.code == "validation_error"


def test_an_owner_defaults_to_nobody() -> None:
    """Both parts are optional, and an owner is a comparable value."""
    assert SessionOwner() == SessionOwner(None, None)
    assert SessionOwner("alice", "acme") != SessionOwner("alice", None)
