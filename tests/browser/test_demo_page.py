"""The demo page in a real headless Chromium, against a real ``helix-dbos serve``.

A user types a message; the agent's text streams into the chat; the client tool
``editContent`` changes the document in the page; ``publishDocument`` waits for the Approve
or Deny button. The page loads nothing from another host, and neither do ``/docs`` and
``/redoc``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.conftest import create_pg_database, drop_pg_database

from .conftest import SECRET, Served, Visit, server_env, start_serve, start_server, stop_serve


@pytest.fixture(scope="module")
def sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``helix-dbos serve --allow-unauthenticated`` on its embedded SQLite file."""
    workdir = tmp_path_factory.mktemp("serve-sqlite")
    served = start_serve(workdir, f"sqlite:///{workdir / 'helix.sqlite'}", secret=None)
    try:
        yield served
    finally:
        stop_serve(served)


@pytest.fixture
def pg_auth_server(tmp_path: Path) -> Iterator[Served]:
    """``helix-dbos serve`` on a fresh Postgres database, with session tokens on."""
    url = create_pg_database()
    try:
        served = start_serve(tmp_path, url, secret=SECRET)
        try:
            yield served
        finally:
            stop_serve(served)
    finally:
        drop_pg_database(url)


def send(page: Page, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.get_by_role("button", name="Send").click()


def test_edit_then_approve_the_publication(sqlite_server: Served, visit: Visit) -> None:
    """The edit lands in the document, the reply streams in, Approve publishes it."""
    page, base = visit.page, sqlite_server.base_url
    page.goto(base + "/")
    document = page.get_by_label("Document")
    expect(document).to_have_value(re.compile(r"The quikc brown fox"))
    log = page.get_by_role("log", name="Conversation")

    send(page, 'replace "quikc" with "quick" and publish')

    expect(document).to_have_value(re.compile(r"The quick brown fox"))
    assert "quikc" not in document.input_value()
    # The model's text arrives over the stream, in an assistant bubble of its own.
    expect(log.locator("li.assistant").first).to_have_text("Applied 1 edit.")
    expect(log).to_contain_text('editContent: {"applied":1,"failed":0,"newVersionId":"v1"}')
    expect(page.get_by_role("group", name="Approval request")).to_be_visible()
    expect(page.get_by_role("status")).to_have_text("Waiting for your approval.")

    page.get_by_role("button", name="Approve").click()

    expect(log).to_contain_text(
        "Applied 1 edit. Published the document at https://docs.example.com/doc-1."
    )
    expect(page.get_by_role("status")).to_have_text("Ready.")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.get_by_role("button", name="Send")).to_be_enabled()

    # The server agrees: the turn completed, nothing waits.
    session_id = page.locator("#session-id").inner_text()
    status = httpx.get(f"{base}/status", params={"sessionId": session_id}, timeout=10).json()
    assert status["status"] == "completed" and status["pendingToolCalls"] == []

    # A second turn in the same session edits the already edited document; an edit whose
    # text is not in the document is reported failed.
    send(page, 'replace "lazy" with "sleepy" and replace "zebra" with "okapi"')
    expect(document).to_have_value(re.compile(r"The quick brown fox jumps over the sleepy dog"))
    expect(log.locator("li.assistant").last).to_have_text("Applied 1 edit. 1 edit failed.")
    expect(log.locator("li.assistant")).to_have_count(3)
    assert "okapi" not in document.input_value()
    expect(page.get_by_role("status")).to_have_text("Ready.")
    assert visit.foreign_requests(base) == []


def test_the_editor_consults_its_reviewer_companion(sqlite_server: Served, visit: Visit) -> None:
    """`review ...`: the editor sends the note to its companion and goes on; the reviewer's
    reply shows in the chat when it comes, and the turn it starts relays it. /status lists
    the companion."""
    page, base = visit.page, sqlite_server.base_url
    page.goto(base + "/")
    log = page.get_by_role("log", name="Conversation")

    send(page, "review the opening line")

    expect(log).to_contain_text("The reviewer has it; its reply will appear here.")
    review = "I read your note (3 words). Looks good to me."
    expect(log.locator("li.companion")).to_have_text(f"reviewer: {review}")
    expect(log.locator("li.assistant").last).to_have_text(f"The reviewer says: {review}")
    # In the order they make sense: the editor's announcement, the reply, the relay (the
    # reply is stored while the announcing turn still streams; the page holds it till then).
    entries = log.locator("li.assistant, li.companion").all_inner_texts()
    assert entries == [
        "Asking the reviewer.",
        "The reviewer has it; its reply will appear here.",
        f"reviewer: {review}",
        f"The reviewer says: {review}",
    ], entries
    page.reload()  # a replay of the stored events shows the same order
    expect(log.locator("li.assistant, li.companion")).to_have_text(entries)
    session_id = page.locator("#session-id").inner_text()
    status = httpx.get(f"{base}/status", params={"sessionId": session_id}, timeout=10).json()
    [companion] = status["companions"]
    assert companion["companion"] == "reviewer" and companion["state"] in ("idle", "hibernated")
    assert visit.foreign_requests(base) == []


def test_deny_with_tokens_on_postgres_and_a_reload(pg_auth_server: Served, visit: Visit) -> None:
    """With session tokens on: the page sends the token /start gave it. A reload while the
    approval waits replays the session without applying the edit twice; Deny is reported."""
    page, base = visit.page, pg_auth_server.base_url
    page.goto(base + "/")
    document = page.get_by_label("Document")
    log = page.get_by_role("log", name="Conversation")

    send(page, 'replace "lazy" with "very lazy" and publish document notes-7')

    expect(document).to_have_value(re.compile(r"over the very lazy dog"))
    approval = page.get_by_role("group", name="Approval request")
    expect(approval).to_be_visible()
    expect(log).to_contain_text('"documentId": "notes-7"')

    # The token the page holds is the session's: without it the server refuses.
    session_id = page.locator("#session-id").inner_text()
    token = page.evaluate("JSON.parse(sessionStorage.getItem('helix-dbos-demo')).token")
    assert token
    params = {"sessionId": session_id}
    assert httpx.get(f"{base}/status", params=params, timeout=10).status_code == 401
    waiting = httpx.get(
        f"{base}/status", params=params, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert waiting.json()["pendingToolCalls"][0]["kind"] == "approval"

    page.reload()

    # The replay rebuilds the chat and the approval; the edit is not applied a second time.
    expect(page.get_by_role("button", name="Deny")).to_be_visible()
    expect(log.locator("li.user")).to_have_text(
        ['replace "lazy" with "very lazy" and publish document notes-7']
    )
    expect(document).to_have_value(re.compile(r"over the very lazy dog"))
    assert "very very" not in document.input_value()

    page.get_by_role("button", name="Deny").click()

    expect(log).to_contain_text("Applied 1 edit. The document was not published")
    expect(log.locator("li.approval")).to_contain_text("publishDocument failed")
    expect(page.get_by_role("status")).to_have_text("Ready.")
    done = httpx.get(
        f"{base}/status", params=params, headers={"Authorization": f"Bearer {token}"}, timeout=10
    ).json()
    assert done["status"] == "completed"
    assert visit.foreign_requests(base) == []


@pytest.fixture
def streaming_server(tmp_path: Path) -> Iterator[Served]:
    """A server whose editor streams its replies one word at a time (streaming_app.py)."""
    command = [sys.executable, "-m", "uvicorn", "tests.browser.streaming_app:app"]
    served = start_server(tmp_path, command, server_env(f"sqlite:///{tmp_path / 'h.sqlite'}"))
    try:
        yield served
    finally:
        stop_serve(served)


#: Records every text the first assistant bubble shows, as the page changes it.
WATCH_REPLY = """() => {
  window.replyTexts = [];
  new MutationObserver(() => {
    const bubble = document.querySelector('#transcript li.assistant');
    const texts = window.replyTexts;
    if (bubble && texts[texts.length - 1] !== bubble.textContent) texts.push(bubble.textContent);
  }).observe(document.getElementById('transcript'),
             {childList: true, subtree: true, characterData: true});
}"""


def test_the_reply_streams_in_word_by_word(streaming_server: Served, visit: Visit) -> None:
    """A model that streams word by word: the page shows the reply growing, then whole."""
    page, base = visit.page, streaming_server.base_url
    page.goto(base + "/")
    page.evaluate(WATCH_REPLY)

    send(page, 'replace "quikc" with "quick" and replace "zebra" with "okapi"')

    reply = page.get_by_role("log", name="Conversation").locator("li.assistant")
    expect(reply).to_have_text("Applied 1 edit. 1 edit failed.")
    expect(page.get_by_role("status")).to_have_text("Ready.")
    texts: list[str] = page.evaluate("window.replyTexts")
    assert texts[-1] == "Applied 1 edit. 1 edit failed."
    # Seen in pieces, each a prefix of the next: the text arrived while the model wrote it.
    assert len(texts) >= 3, texts
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False)), texts
    assert texts[0] != texts[-1]


def test_a_message_over_a_waiting_approval_abandons_it(sqlite_server: Served, visit: Visit) -> None:
    """Send while the approval waits: the call is abandoned and the agent reads the message."""
    page, base = visit.page, sqlite_server.base_url
    page.goto(base + "/")
    log = page.get_by_role("log", name="Conversation")
    send(page, 'replace "dog" with "cat" and publish')
    expect(page.get_by_role("button", name="Approve")).to_be_visible()

    send(page, 'replace "fox" with "wolf"')

    expect(page.get_by_label("Document")).to_have_value(re.compile(r"brown wolf .* lazy cat"))
    expect(log.locator("li.approval")).to_contain_text("publishDocument failed")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.get_by_role("status")).to_have_text("Ready.")


def test_swagger_ui_renders_offline(sqlite_server: Served, visit: Visit) -> None:
    """/docs: Swagger UI renders the OpenAPI document from the server's own files."""
    page, base = visit.page, sqlite_server.base_url
    page.goto(base + "/docs")
    expect(
        page.locator(".opblock-summary-path", has_text="/submit-tool-result").first
    ).to_be_visible()
    assert any(url.endswith("/openapi.json") for url in visit.requests)
    assert visit.foreign_requests(base) == []


def test_redoc_renders_offline(sqlite_server: Served, visit: Visit) -> None:
    """/redoc: ReDoc renders the OpenAPI document from the server's own files."""
    page, base = visit.page, sqlite_server.base_url
    page.goto(base + "/redoc")
    expect(page.get_by_role("heading", name=re.compile("agent server")).first).to_be_visible()
    assert visit.foreign_requests(base) == []
