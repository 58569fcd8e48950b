"""The humanized text of framework-made tool failures, and its injection point."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from helix_dbos import humanize_client_tool_error, set_client_tool_error_humanizer


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    yield
    set_client_tool_error_humanizer(None)


def test_builtin_text_names_the_tool() -> None:
    """The default text is English and names the tool; unknown codes pass through."""
    assert "'editContent'" in humanize_client_tool_error("client_tool_timeout", "editContent")
    assert humanize_client_tool_error("my_code", "t") == "my_code"


def test_a_deployment_can_supply_its_own_text() -> None:
    """An installed humanizer wins; returning None falls back to the built-in text."""
    set_client_tool_error_humanizer(
        lambda code, tool: (
            f"Zeitüberschreitung bei {tool}" if code == "client_tool_timeout" else None
        )
    )
    assert humanize_client_tool_error("client_tool_timeout", "x") == "Zeitüberschreitung bei x"
    assert "abandoned" in humanize_client_tool_error("client_tool_abandoned", "x")
