"""The demo's approvals page in a real headless Chromium, against a real ``helix-dbos serve``.

The page lists the approvals waiting across sessions (``GET /approvals``), oldest first, in a
region named "Approvals", and answers each with its "Approve" or "Deny" button (a denial with
the reason typed next to it) through ``/submit-tool-result``. With session tokens on, it lists
the sessions this browser started (each with its own token), never another client's; on a
server without authentication, every session's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.inbox_page import events, send, wait_status
from tests.conftest import create_pg_database, drop_pg_database

from .conftest import SECRET, Served, Visit, start_serve, stop_serve


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``helix-dbos serve`` with session tokens on, on its embedded SQLite file."""
    workdir = tmp_path_factory.mktemp("approvals-sqlite")
    served = start_serve(workdir, f"sqlite:///{workdir / 'helix.sqlite'}", secret=SECRET)
    try:
        yield served
    finally:
        stop_serve(served)


@pytest.fixture(scope="module")
def open_pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``helix-dbos serve --allow-unauthenticated`` on a fresh Postgres database."""
    url = create_pg_database()
    try:
        served = start_serve(tmp_path_factory.mktemp("approvals-pg"), url, secret=None)
        try:
            yield served
        finally:
            stop_serve(served)
    finally:
        drop_pg_database(url)


def start_parked(base: str, document: str) -> dict[str, Any]:
    """A session started by another client (not the browser), parked on its approval."""
    body = {"agentType": "editor", "message": f"publish document {document}"}
    started: dict[str, Any] = httpx.post(f"{base}/start", json=body, timeout=10).json()
    headers = {"Authorization": f"Bearer {started['token']}"} if "token" in started else {}
    deadline = time.monotonic() + 30
    while True:
        view = httpx.get(
            f"{base}/status", params={"sessionId": started["sessionId"]}, headers=headers
        ).json()
        if view["pendingToolCalls"]:
            return {**started, "headers": headers}
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


def card(page: Page, document: str) -> Locator:
    """The approval of the publication of ``document`` in the page's list."""
    region = page.get_by_role("region", name="Approvals")
    return region.get_by_role("listitem").filter(has_text=f'"documentId": "{document}"')


def test_with_session_tokens_it_lists_and_answers_the_sessions_this_browser_started(
    token_server: Served, visit: Visit
) -> None:
    page, base = visit.page, token_server.base_url
    page.goto(base + "/")
    send(page, "publish document alpha")
    expect(page.get_by_role("group", name="Approval request")).to_be_visible()
    page.get_by_role("button", name="New conversation").click()
    send(page, "publish document beta")
    expect(page.get_by_role("group", name="Approval request")).to_be_visible()
    # Another client's session: its token is not the browser's.
    other = start_parked(base, "gamma")

    page.get_by_role("link", name="Approvals").click()
    region = page.get_by_role("region", name="Approvals")
    expect(region.get_by_role("listitem")).to_have_count(2)
    expect(region.get_by_role("listitem").first).to_contain_text('"documentId": "alpha"')
    expect(region).to_contain_text("the approvals of the 2 conversations this browser started")
    expect(page.get_by_role("status").first).to_have_text("2 approvals waiting.")
    expect(card(page, "gamma")).to_have_count(0)

    alpha = card(page, "alpha")
    alpha.get_by_role("button", name="Approve").click()
    expect(alpha).to_contain_text("Approved.")
    beta = card(page, "beta")
    beta.get_by_role("textbox", name="Reason").fill("not this week")
    beta.get_by_role("button", name="Deny").click()
    expect(beta).to_contain_text("Denied.")
    expect(beta.get_by_role("button", name="Deny")).to_be_disabled()

    # The server agrees, session by session, with the tokens the chat page recorded.
    held = page.evaluate("JSON.parse(localStorage.getItem('helix-dbos-demo-sessions'))")
    tokens = {h["sessionId"]: {"Authorization": f"Bearer {h['token']}"} for h in held}
    alpha_label = alpha.get_attribute("aria-label") or ""
    beta_label = beta.get_attribute("aria-label") or ""
    (alpha_id,) = [s for s in tokens if s in alpha_label]
    (beta_id,) = [s for s in tokens if s in beta_label]
    wait_status(base, alpha_id, tokens[alpha_id], "completed")
    wait_status(base, beta_id, tokens[beta_id], "completed")
    (published,) = [e for e in events(base, alpha_id, tokens[alpha_id]) if e["type"] == "tool_end"]
    assert published["data"]["output"]["url"].endswith("/alpha")
    (denied,) = [e for e in events(base, beta_id, tokens[beta_id]) if e["type"] == "tool_end"]
    assert denied["data"]["errorCode"] == "approval_denied"
    assert "not this week" in denied["data"]["error"]
    # The other client's approval still waits, untouched.
    other_view = httpx.get(
        f"{base}/status", params={"sessionId": other["sessionId"]}, headers=other["headers"]
    ).json()
    assert other_view["waitingFor"] == ["approval"]

    page.get_by_role("button", name="Refresh").click()
    expect(page.get_by_role("status").first).to_have_text("No approval is waiting.")
    # Refresh shows what waits now: the cards answered here are gone with their buttons.
    expect(page.get_by_role("region", name="Approvals").get_by_role("listitem")).to_have_count(0)
    assert visit.foreign_requests(base) == []


def test_the_chat_and_the_inbox_keep_in_step(token_server: Served, visit: Visit) -> None:
    """An approval answered in the inbox closes at once in the open chat (no reload); one
    answered from outside the browser closes there within seconds; the inbox, which holds
    the browser's session tokens, never sends a request to be refused (no 401, no console
    error)."""
    chat, base = visit.page, token_server.base_url
    chat.goto(base + "/")
    log = chat.get_by_role("log", name="Conversation")
    send(chat, "publish document zeta")
    expect(chat.get_by_role("group", name="Approval request")).to_be_visible()

    inbox = visit.context.new_page()
    refused: list[str] = []
    errors: list[str] = []
    inbox.on("response", lambda r: refused.append(r.url) if r.status in (401, 403) else None)
    inbox.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    inbox.goto(base + "/inbox")
    zeta = card(inbox, "zeta")
    zeta.get_by_role("button", name="Approve").click()
    expect(zeta).to_contain_text("Approved.")

    # The chat shows the decision without a reload: no buttons left, the tool's output, done.
    expect(chat.get_by_role("group", name="Approval request")).to_have_count(0)
    expect(log).to_contain_text("https://docs.example.com/zeta")
    expect(chat.get_by_role("status")).to_have_text("Ready.")

    # Answered from outside the browser (a shell, another device): the chat follows too.
    send(chat, "publish document eta")
    expect(chat.get_by_role("group", name="Approval request")).to_be_visible()
    session_id = chat.locator("#session-id").inner_text()
    held = chat.evaluate("JSON.parse(localStorage.getItem('helix-dbos-demo-sessions'))")
    (token,) = [h["token"] for h in held if h["sessionId"] == session_id]
    headers = {"Authorization": f"Bearer {token}"}
    view = httpx.get(f"{base}/status", params={"sessionId": session_id}, headers=headers).json()
    (waiting,) = view["pendingToolCalls"]
    answered = httpx.post(
        f"{base}/submit-tool-result",
        json={
            "kind": "approval-response",
            "sessionId": session_id,
            "toolCallId": waiting["toolCallId"],
            "approvalId": waiting["approvalId"],
            "approved": False,
            "reason": "from a shell",
        },
        headers=headers,
        timeout=10,
    )
    assert answered.status_code == 200, answered.text
    expect(chat.get_by_role("group", name="Approval request")).to_have_count(0)
    expect(log).to_contain_text("from a shell")

    inbox.get_by_role("button", name="Refresh").click()
    expect(inbox.get_by_role("status").first).to_have_text("No approval is waiting.")
    expect(inbox.get_by_role("region", name="Approvals").get_by_role("listitem")).to_have_count(0)
    assert refused == [] and errors == [], (refused, errors)
    assert visit.foreign_requests(base) == []


def test_without_authentication_it_lists_every_session_and_says_when_one_is_gone(
    open_pg_server: Served, visit: Visit
) -> None:
    page, base = visit.page, open_pg_server.base_url
    delta = start_parked(base, "delta")
    epsilon = start_parked(base, "epsilon")
    # Served like the chat page: nothing loads from elsewhere, no inline script, no framing.
    served = httpx.get(f"{base}/inbox", timeout=10)
    assert "default-src 'self'" in served.headers["content-security-policy"]
    page.goto(base + "/inbox")
    region = page.get_by_role("region", name="Approvals")
    expect(region).to_contain_text("Every session of this server.")
    expect(region.get_by_role("listitem")).to_have_count(2)
    expect(region.get_by_role("listitem").first).to_contain_text(delta["sessionId"])

    row = card(page, "delta")
    row.get_by_role("textbox", name="Reason").fill("wrong document")
    row.get_by_role("button", name="Deny").click()
    expect(row).to_contain_text("Denied.")
    wait_status(base, delta["sessionId"], {}, "completed")
    (denied,) = [e for e in events(base, delta["sessionId"], {}) if e["type"] == "tool_end"]
    assert "wrong document" in denied["data"]["error"]

    # Stopped after the page listed it: the answer is refused, and the page says why.
    stopped = httpx.post(f"{base}/interrupt", json={"sessionId": epsilon["sessionId"]}, timeout=10)
    assert stopped.status_code == 200
    late = card(page, "epsilon")
    late.get_by_role("button", name="Approve").click()
    expect(late).to_contain_text("No longer waiting (run_stopped).")
    page.get_by_role("button", name="Refresh").click()
    expect(page.get_by_role("status").first).to_have_text("No approval is waiting.")
    assert visit.foreign_requests(base) == []
