"""A restart of the demo server is invisible to a page that is open.

The server is started the way ``scripts/demo`` starts it: with the session-token secret and
the executor id of the demo's state file (``scripts/demo-state.bash``), so a second start
reuses them. The server is killed (``SIGKILL``: a crash, no clean stop) while the page waits
for an approval; after the restart the page's token is still valid, a reload shows the
approval again, and the approval (also one clicked while the server was down, which the page
sends again until the server answers) continues the turn at once: the restarted process
recovers its own turn at launch, it does not wait for the fleet to adopt a dead executor's.
The adoption window is set long (60 s) so that waiting for it could not pass for a fast turn.
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, Route, expect

from .conftest import ROOT, Served, Visit, server_env, start_server, stop_serve

#: Much longer than a restart: a turn that waited for adoption could not finish in time.
ADOPT_AFTER_SECONDS = 60
#: How long the turn may take to finish after the approval reaches the restarted server.
QUICKLY_MS = 15_000

#: Starts ``serve`` with the state file's secret and executor id, as scripts/demo does.
DEMO_START = (
    'source "$0" && demo_state_use "$(demo_state_file "${HELIX_DATABASE_URL}")" "$@" && exec "$@"'
)


def start_demo(workdir: Path, *, port: int | None = None) -> Served:
    """The demo server on ``workdir/demo.sqlite``, its state in ``workdir/demo.env``."""
    env = server_env(f"sqlite:///{workdir / 'demo.sqlite'}")
    env.pop("HELIX_EXECUTOR_ID", None)
    env["HELIX_ADOPT_AFTER_SECONDS"] = str(ADOPT_AFTER_SECONDS)
    helper = str(ROOT / "scripts" / "demo-state.bash")
    serve = [sys.executable, "-m", "helix_dbos.cli", "serve", "--host", "127.0.0.1"]
    return start_server(workdir, ["bash", "-c", DEMO_START, helper, *serve], env, port=port)


def crash(served: Served) -> None:
    """Kill the server the hard way: nothing is marked stopped, its heartbeat looks fresh."""
    served.process.send_signal(signal.SIGKILL)
    served.process.wait(30)


def port_of(served: Served) -> int:
    return int(served.base_url.rsplit(":", 1)[1])


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[list[Served]]:
    """The running demo server (the last of the list); every one is stopped at the end."""
    started = [start_demo(tmp_path)]
    try:
        yield started
    finally:
        for served in started:
            if served.process.poll() is None:
                stop_serve(served)


def restart(demo: list[Served], tmp_path: Path) -> Served:
    """A new demo server on the same port and state, after the last one crashed."""
    served = start_demo(tmp_path, port=port_of(demo[-1]))
    demo.append(served)
    return served


def ask_for_an_approval(page: Page, base_url: str) -> None:
    page.goto(base_url + "/")
    page.get_by_label("Message").fill('replace "quikc" with "quick" and publish')
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    expect(page.get_by_role("status")).to_have_text("Waiting for your approval.")


def expect_published(page: Page) -> None:
    log = page.get_by_role("log", name="Conversation")
    expect(log).to_contain_text(
        "Applied 1 edit. Published the document at https://docs.example.com/doc-1.",
        timeout=QUICKLY_MS,
    )
    expect(page.get_by_role("status")).to_have_text("Ready.")
    expect(log.locator("li.approval")).to_contain_text("publishDocument: ")


def test_a_crash_and_restart_keep_the_open_page(
    demo: list[Served], tmp_path: Path, visit: Visit
) -> None:
    """After the restart a reload shows the approval again; Approve finishes the turn."""
    page = visit.page
    ask_for_an_approval(page, demo[-1].base_url)
    state = (tmp_path / "demo.env").read_text()

    crash(demo[-1])
    restart(demo, tmp_path)
    assert (tmp_path / "demo.env").read_text() == state, "the restart reused the state file"

    page.reload()
    expect(page.get_by_role("button", name="Approve")).to_be_visible(timeout=QUICKLY_MS)
    expect(page.get_by_role("status")).to_have_text("Waiting for your approval.")
    expect(page.get_by_role("log", name="Conversation").locator("li.user")).to_have_text(
        ['replace "quikc" with "quick" and publish']
    )
    expect(page.get_by_label("Document")).to_have_value(re.compile(r"The quick brown fox"))

    page.get_by_role("button", name="Approve").click()

    expect_published(page)


def test_an_approval_clicked_while_the_server_is_down_is_delivered(
    demo: list[Served], tmp_path: Path, visit: Visit
) -> None:
    """Approve while the server is down: the page says it retries, and sends it once the
    restarted server answers."""
    page = visit.page
    ask_for_an_approval(page, demo[-1].base_url)
    crash(demo[-1])

    page.get_by_role("button", name="Approve").click()

    status = page.get_by_role("status")
    expect(status).to_contain_text("The server cannot be reached; retrying your approval")
    restart(demo, tmp_path)
    expect_published(page)


#: Records every text the status line shows, as the page changes it.
WATCH_STATUS = """() => {
  window.statuses = [];
  const status = document.getElementById('status');
  new MutationObserver(() => window.statuses.push(status.textContent))
    .observe(status, {childList: true, subtree: true, characterData: true});
}"""


def test_a_client_tool_result_is_sent_again_until_the_server_answers(
    demo: list[Served], visit: Visit
) -> None:
    """The edit's result cannot reach the server twice (no network, then 503): the page keeps
    it and sends it again; the edit is applied once."""
    page = visit.page
    failures = ["abort", 503]

    def flaky(route: Route) -> None:
        if not failures:
            route.continue_()
        elif failures.pop(0) == "abort":
            route.abort("connectionrefused")
        else:
            route.fulfill(status=503, body="upstream down")

    page.route("**/submit-tool-result", flaky)
    page.goto(demo[-1].base_url + "/")
    page.evaluate(WATCH_STATUS)
    page.get_by_label("Message").fill('replace "quikc" with "quick" and publish')
    page.get_by_role("button", name="Send").click()

    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    assert failures == [], "both failed sends were retried"
    log = page.get_by_role("log", name="Conversation")
    expect(log).to_contain_text('editContent: {"applied":1,"failed":0,"newVersionId":"v1"}')
    expect(page.locator("#document-version")).to_have_text("1")
    statuses: list[str] = page.evaluate("window.statuses")
    retries = [s for s in statuses if "retrying the result of editContent" in s]
    assert len(retries) == 2, statuses

    page.get_by_role("button", name="Approve").click()
    expect_published(page)
