"""Hypothesis strategies shared by the pure modules' tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

#: JSON scalars as ``json.loads`` gives them back (finite floats only: NaN never round-trips).
json_scalars: st.SearchStrategy[Any] = st.none() | st.booleans() | st.integers() | st.text()
json_scalars = json_scalars | st.floats(allow_nan=False, allow_infinity=False)

#: Any JSON value: scalars, lists and objects, a few levels deep.
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)

#: A JSON object (what a tool call's input is).
json_objects: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
    st.text(), json_values, max_size=4
)
