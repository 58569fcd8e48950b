"""What the approvals page tests share: sending a turn, reading its events, waiting for a status."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from playwright.sync_api import Page


def send(page: Page, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.get_by_role("button", name="Send").click()


def events(base: str, session_id: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{base}/sse", params={"sessionId": session_id}, headers=headers, timeout=20
    ).text
    return [
        json.loads(line[len("data: ") :])
        for line in answer.splitlines()
        if line.startswith("data: ")
    ]


def wait_status(base: str, session_id: str, headers: dict[str, str], want: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        view = httpx.get(
            f"{base}/status", params={"sessionId": session_id}, headers=headers, timeout=10
        ).json()
        if view["status"] == want:
            return
        assert time.monotonic() < deadline, view
        time.sleep(0.05)
