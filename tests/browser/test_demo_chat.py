"""The demo page's chat in a real headless Chromium, against a real ``helix-dbos serve``.

A second turn shows the user's message before the turn's tool line, live as after a reload;
the served demo streams its replies so a bubble grows; a message the agent does not understand
gets what it understands, and the document stays as it was; the last bubble stays in view
when the chat is full; a 420 px wide window does not scroll sideways.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from .conftest import Served, Visit, start_serve, stop_serve


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``helix-dbos serve --allow-unauthenticated`` on its embedded SQLite file."""
    workdir = tmp_path_factory.mktemp("serve-chat")
    served = start_serve(workdir, f"sqlite:///{workdir / 'helix.sqlite'}", secret=None)
    try:
        yield served
    finally:
        stop_serve(served)


def send(page: Page, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.get_by_role("button", name="Send").click()


def turn(page: Page, text: str, replies: int) -> None:
    """Send ``text`` and wait until the turn's reply (the ``replies``-th) is in and whole."""
    send(page, text)
    expect(page.locator("#transcript li.assistant")).to_have_count(replies)
    expect(page.get_by_role("status")).to_have_text("Ready.")
    expect(page.get_by_role("button", name="Send")).to_be_enabled()


def entries(page: Page) -> list[tuple[str, str]]:
    """The transcript, in order: (kind, text) of each entry."""
    items = page.locator("#transcript li")
    return [
        (items.nth(i).get_attribute("class") or "", items.nth(i).inner_text())
        for i in range(items.count())
    ]


def kinds(page: Page) -> list[str]:
    return [kind.split()[0] for kind, _ in entries(page)]


def hold_next_stream_until_parked(page: Page, base: str) -> None:
    """Hold the page's next ``GET /sse`` until its session waits on a call (a slow network):
    the stream then attaches to a parked turn and replays it."""
    held: list[str] = []

    def handle(route: Route) -> None:
        if not held:
            held.append(route.request.url)
            sid = parse_qs(urlparse(route.request.url).query)["sessionId"][0]
            deadline = time.monotonic() + 20
            while True:
                view = httpx.get(f"{base}/status", params={"sessionId": sid}, timeout=5).json()
                if any(p.get("submittedAt") is None for p in view["pendingToolCalls"]):
                    break
                assert time.monotonic() < deadline, view
                time.sleep(0.05)
        route.continue_()

    page.route(re.compile(r"/sse\?"), handle)


def test_a_second_turn_shows_the_message_before_its_tool_line(server: Served, visit: Visit) -> None:
    """Live, the second turn reads: the user's message, its edit, the reply; as a reload
    shows it."""
    page, base = visit.page, server.base_url
    page.goto(base + "/")
    turn(page, 'replace "quikc" with "quick"', replies=1)
    hold_next_stream_until_parked(page, base)

    turn(page, 'replace "lazy" with "sleepy"', replies=2)

    expected = ["user", "tool", "assistant", "user", "tool", "assistant"]
    live = entries(page)
    assert kinds(page) == expected, live
    assert live[3][1] == 'replace "lazy" with "sleepy"'
    assert live[4][1].startswith('editContent: {"applied":1')
    page.reload()
    expect(page.locator("#transcript li.assistant")).to_have_count(2)
    expect(page.get_by_role("status")).to_have_text("Ready.")
    assert entries(page) == live


#: Records every text of the last assistant bubble as the page changes it.
WATCH_LAST_REPLY = """() => {
  window.replyTexts = [];
  new MutationObserver(() => {
    const bubbles = document.querySelectorAll('#transcript li.assistant');
    const last = bubbles[bubbles.length - 1];
    const texts = window.replyTexts;
    if (last && texts[texts.length - 1] !== last.textContent) texts.push(last.textContent);
  }).observe(document.getElementById('transcript'),
             {childList: true, subtree: true, characterData: true});
}"""


def test_a_message_it_does_not_understand_streams_what_it_understands(
    server: Served, visit: Visit
) -> None:
    """`hello`: the reply grows in the bubble (several deltas), says what the agent
    understands, and the document is the same text as before."""
    page, base = visit.page, server.base_url
    page.goto(base + "/")
    document = page.get_by_label("Document")
    before = document.input_value()
    page.evaluate(WATCH_LAST_REPLY)

    turn(page, "hello", replies=1)

    reply = page.locator("#transcript li.assistant").last
    expect(reply).to_contain_text("I did not understand that")
    expect(reply).to_contain_text('replace "old" with "new"')
    texts: list[str] = page.evaluate("window.replyTexts")
    assert len(texts) >= 3, texts
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False)), texts
    assert texts[-1] == reply.text_content()
    assert document.input_value() == before
    assert "tool" not in kinds(page)


def test_publish_alone_asks_approval_for_the_text_as_it_is(server: Served, visit: Visit) -> None:
    """`publish`: no edit, the approval card, and the document published unchanged."""
    page, base = visit.page, server.base_url
    page.goto(base + "/")
    document = page.get_by_label("Document")
    before = document.input_value()

    send(page, "publish")

    expect(page.get_by_role("group", name="Approval request")).to_be_visible()
    assert document.input_value() == before
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#transcript li.assistant").last).to_have_text(
        "Published the document at https://docs.example.com/doc-1."
    )
    assert document.input_value() == before
    assert "editContent" not in page.locator("#transcript").inner_text()


#: Where the last entry, the transcript's box and the status line are.
BOXES = """() => {
  const t = document.getElementById('transcript');
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.top, r.bottom]; };
  return {last: box(t.lastElementChild), transcript: box(t), status: box(
    document.getElementById('status')), overflows: t.scrollHeight > t.clientHeight};
}"""


def test_the_last_bubble_stays_in_view_when_the_chat_is_full(server: Served, visit: Visit) -> None:
    """Once the chat scrolls, the last bubble (a reply that grew while it streamed) is inside
    the transcript's box, above the status line."""
    page, base = visit.page, server.base_url
    page.set_viewport_size({"width": 1280, "height": 500})
    page.goto(base + "/")
    turn(page, 'replace "quikc" with "quick"', replies=1)
    turn(page, 'replace "lazy" with "sleepy"', replies=2)
    turn(page, "what now?", replies=3)  # a long reply, streamed into a full chat

    boxes = page.evaluate(BOXES)
    assert boxes["overflows"], boxes
    last_top, last_bottom = boxes["last"]
    top, bottom = boxes["transcript"]
    assert top <= last_top and last_bottom <= bottom + 1, boxes
    assert last_bottom <= boxes["status"][0], boxes


def test_no_sideways_scroll_at_420_px(server: Served, visit: Visit) -> None:
    """A phone-sized window: neither the page nor its header is wider than the window, with
    a session id in the header and a turn in the chat."""
    page, base = visit.page, server.base_url
    page.set_viewport_size({"width": 420, "height": 800})
    page.goto(base + "/")
    turn(page, 'replace "quikc" with "quick"', replies=1)
    expect(page.locator("#session-id")).to_have_text(re.compile(r"^ses_"))

    widths = page.evaluate(
        """() => {
          const root = document.documentElement, header = document.querySelector('header');
          return [root.scrollWidth, root.clientWidth, header.scrollWidth, header.clientWidth];
        }"""
    )
    page_scroll, page_width, header_scroll, header_width = widths
    assert page_scroll <= page_width and header_scroll <= header_width, widths
    for name in ("New conversation", "Send", "Stop"):
        box = page.get_by_role("button", name=name).bounding_box()
        assert box is not None and box["x"] + box["width"] <= page_width, (name, box)
