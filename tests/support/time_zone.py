"""A test's process in a time zone other than UTC (``tokyo``), as on a host not set to UTC."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

_ZONE = "Asia/Tokyo"


@pytest.fixture
def tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process in Tokyo's time zone (UTC+9, no daylight saving) for the test."""
    monkeypatch.setenv("TZ", _ZONE)
    time.tzset()
    try:
        assert datetime.now().astimezone().utcoffset() == timedelta(hours=9)
        yield
    finally:
        monkeypatch.undo()
        time.tzset()
        assert os.environ.get("TZ") != _ZONE
