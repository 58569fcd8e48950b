"""The demo's two-approver tool from the browser, in a real headless Chromium against a real
``helix-dbos serve`` started as ``scripts/demo`` starts it: session tokens, the tenant
``demo`` (``HELIX_TENANT``), and two approver tokens from ``helix-dbos approver-token``,
handed to the approvals page in its address (``inbox#approvers=...``).

``delete document X`` calls ``deleteDocument``, whose policy needs two approvers (four eyes, a
quorum of two). The chat's card says so and sends the human to the approvals page, where
"Approve as" picks ann or bo: ann's approval shows "1 of 2" in the inbox and in the chat, a
second approval by ann counts for nothing, and bo's runs the tool, once.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import expect

from .conftest import SECRET, Served, Visit, server_env, start_server, stop_serve
from .inbox_page import events, send, wait_status

DOCUMENT = "old-notes"


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, list[str]]]:
    """The demo server of one tenant, and the two approver tokens scripts/demo prints."""
    workdir = tmp_path_factory.mktemp("demo-quorum")
    env = server_env(f"sqlite:///{workdir / 'demo.sqlite'}", secret=SECRET)
    env["HELIX_TENANT"] = "demo"
    command = [sys.executable, "-m", "helix_dbos.cli"]
    issued = subprocess.run(
        [*command, "approver-token", "--principal", "ann@example.com"]
        + ["--principal", "bo@example.com", "--ttl", "1h"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    tokens = issued.stdout.split()
    assert len(tokens) == 2, issued.stdout
    served = start_server(workdir, [*command, "serve"], env)
    try:
        yield served, tokens
    finally:
        stop_serve(served)


def test_two_approvers_reach_the_quorum_from_the_page(
    demo_server: tuple[Served, list[str]], visit: Visit
) -> None:
    served, tokens = demo_server
    chat, base = visit.page, served.base_url
    chat.goto(base + "/")
    log = chat.get_by_role("log", name="Conversation")
    send(chat, f"delete document {DOCUMENT}")
    # The chat's session token names nobody: the card sends the human to the approvals page.
    expect(log).to_contain_text("Needs 2 approvers, not you: approve it in Approvals.")
    expect(chat.get_by_role("group", name="Approval request")).to_have_count(0)
    session_id = chat.locator("#session-id").inner_text()

    inbox = visit.context.new_page()
    inbox.goto(base + "/inbox#approvers=" + ",".join(tokens))
    expect(inbox).to_have_url(base + "/inbox")  # the tokens leave the address at once
    approve_as = inbox.get_by_label("Approve as")
    expect(approve_as.locator("option")).to_have_text(["ann@example.com", "bo@example.com"])
    region = inbox.get_by_role("region", name="Approvals")
    expect(region).to_contain_text("Approving as ann@example.com: the approvals of tenant demo")
    card = region.get_by_role("listitem").filter(has_text=f'"documentId": "{DOCUMENT}"')
    expect(card).to_have_count(1)

    approve_as.select_option("ann@example.com")
    card.get_by_role("button", name="Approve").click()
    expect(card).to_contain_text("Approved as ann@example.com; the quorum waits")
    expect(card).to_contain_text("approved by 1 of 2 (ann@example.com)")
    expect(log).to_contain_text("Approved by 1 of 2 (ann@example.com); waiting for more approvers.")

    # ann again: the same approver counts once.
    card.get_by_role("button", name="Approve").click()
    expect(card).to_contain_text("Approved as ann@example.com; the quorum waits")
    inbox.get_by_role("button", name="Refresh").click()
    expect(card).to_contain_text("approved by 1 of 2 (ann@example.com)")
    ann = {"Authorization": f"Bearer {tokens[0]}"}
    recorded = httpx.get(
        f"{base}/approvals/decisions", params={"sessionId": session_id}, headers=ann, timeout=10
    ).json()["decisions"]
    assert [(d["principal"], d["votes"], d["final"]) for d in recorded] == [
        ("ann@example.com", 1, False)
    ]

    # bo: the second approver completes the quorum, and the tool runs.
    approve_as.select_option("bo@example.com")
    expect(region).to_contain_text("Approving as bo@example.com")
    card.get_by_role("button", name="Approve").click()
    expect(card).to_contain_text("Approved as bo@example.com.")
    expect(log).to_contain_text(f"Deleted document {DOCUMENT}.")

    wait_status(base, session_id, ann, "completed")
    ends = [e for e in events(base, session_id, ann) if e["type"] == "tool_end"]
    assert len(ends) == 1, ends
    assert ends[0]["data"]["output"] == {"deleted": True, "documentId": DOCUMENT}
    assert ends[0]["data"]["decider"]["approvers"] == ["ann@example.com", "bo@example.com"]
    recorded = httpx.get(
        f"{base}/approvals/decisions", params={"sessionId": session_id}, headers=ann, timeout=10
    ).json()["decisions"]
    assert sorted((d["principal"], d["votes"], d["final"], d["credential"]) for d in recorded) == [
        ("ann@example.com", 1, False, "approver_token"),
        ("bo@example.com", 2, True, "approver_token"),
    ]
    assert visit.foreign_requests(base) == []
