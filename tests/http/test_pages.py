"""The pages of the standalone server: the demo page at / and the API docs, all local.

The apps here are never started (no lifespan): the pages need no runtime. The browser tests
in tests/browser drive the same pages in Chromium against a running server.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from helix_dbos.config import HelixSettings
from helix_dbos.core.agents import define_agent
from helix_dbos.demo import demo_agents
from helix_dbos.errors import ConfigError
from helix_dbos.http import demo_page
from helix_dbos.http.app import create_app
from helix_dbos.llm.scripted import ScriptedLLM, reply
from helix_dbos.runtime import AgentRuntime

#: An absolute URL, or one relative to the scheme (``//host/...``).
EXTERNAL = re.compile(r"""(?:https?:)?//[\w.-]+\.\w""", re.IGNORECASE)
#: Where an HTML page loads something from.
LOADS = re.compile(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|\burl:\s*'([^']+)'""")


def settings(tmp_path: Path) -> HelixSettings:
    return HelixSettings(database_url=f"sqlite:///{tmp_path}/pages.db")


def client_of(app: Any, root_path: str = "") -> httpx.AsyncClient:
    """A client calling the app in process (no server, no lifespan)."""
    transport = httpx.ASGITransport(app=app, root_path=root_path)
    return httpx.AsyncClient(transport=transport, base_url="http://pages.test")


@pytest.fixture
async def demo_client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    runtime = AgentRuntime(demo_agents(), settings(tmp_path))
    async with client_of(create_app(runtime, allow_unauthenticated=True)) as client:
        yield client


def other_runtime(tmp_path: Path) -> AgentRuntime:
    agent = define_agent("support", llm=ScriptedLLM(lambda _r: reply("hello")))
    return AgentRuntime([agent], settings(tmp_path))


def loaded_urls(html: str) -> list[str]:
    return [a or b for a, b in LOADS.findall(html)]


async def test_the_demo_page_is_served_with_the_demo_agents(
    demo_client: httpx.AsyncClient,
) -> None:
    """GET / is the page: the labelled controls, its own assets, a strict CSP."""
    page = await demo_client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    html = page.text
    assert '<label for="document">Document</label>' in html
    assert '<label for="message">Message</label>' in html
    assert ">Send</button>" in html
    assets = loaded_urls(html)
    assert "demo-page/demo.js" in assets and "demo-page/demo.css" in assets
    # The page links what the demo has: the approval inbox, the API docs and the metrics.
    assert {"inbox", "docs", "metrics"} <= set(assets)
    for asset in assets:
        if asset.startswith("data:") or asset == "metrics":  # a scrape needs its token
            continue
        assert not EXTERNAL.match(asset), asset
        assert (await demo_client.get("/" + asset)).status_code == 200, asset
    script = await demo_client.get("/demo-page/demo.js")
    assert "javascript" in script.headers["content-type"]
    assert "'Approve'" in script.text and "'Deny'" in script.text


def test_the_page_files_name_no_other_host() -> None:
    """Nothing in the page's HTML, script or stylesheet points at another host."""
    static = Path(demo_page.__file__).parent / "static"
    files = sorted(static.iterdir())
    assert {f.name for f in files} == {
        "index.html",
        "demo.js",
        "demo.css",
        "approvals.html",
        "approvals.js",
        "approvals.css",
    }
    for file in files:
        assert not EXTERNAL.search(file.read_text()), file.name


async def test_no_page_for_an_app_without_the_demo_agent(tmp_path: Path) -> None:
    """Another app's agents: / is the typed 404; asking for the page is a ConfigError."""
    app = create_app(other_runtime(tmp_path), allow_unauthenticated=True)
    async with client_of(app) as client:
        missing = await client.get("/")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    with pytest.raises(ConfigError, match="demo page"):
        create_app(other_runtime(tmp_path), allow_unauthenticated=True, demo_page=True)


async def test_the_page_can_be_switched_off(tmp_path: Path) -> None:
    """demo_page=False: no page even with the demo agents; the API docs stay."""
    runtime = AgentRuntime(demo_agents(), settings(tmp_path))
    app = create_app(runtime, allow_unauthenticated=True, demo_page=False)
    async with client_of(app) as client:
        assert (await client.get("/")).status_code == 404
        assert (await client.get("/docs")).status_code == 200


def test_serves_demo_agent_needs_the_client_tool(tmp_path: Path) -> None:
    """An `editor` without the client tool editContent is not the page's agent."""
    from helix_dbos.core.agents import AgentRegistry

    assert demo_page.serves_demo_agent(AgentRegistry(demo_agents()))
    plain_editor = define_agent("editor", llm=ScriptedLLM(lambda _r: reply("hi")))
    assert not demo_page.serves_demo_agent(AgentRegistry([plain_editor]))
    assert not demo_page.serves_demo_agent(AgentRegistry())


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
async def test_the_api_docs_reference_no_external_url(
    demo_client: httpx.AsyncClient, path: str
) -> None:
    """/docs (Swagger UI) and /redoc load their scripts, styles and icon from this server,
    Swagger UI's online validator is off, and ReDoc loads no web fonts."""
    page = await demo_client.get(path)
    assert page.status_code == 200
    assert not EXTERNAL.search(page.text), EXTERNAL.findall(page.text)
    assets: list[Any] = loaded_urls(page.text)
    assert "/openapi.json" in assets
    assert any(a.endswith(".js") for a in assets)
    for asset in assets:
        assert asset.startswith("/"), asset
        assert (await demo_client.get(asset)).status_code == 200, asset
    if path == "/docs":
        assert '"validatorUrl": null' in page.text
        assert (await demo_client.get("/docs/oauth2-redirect")).status_code == 200


async def test_the_docs_follow_the_root_path(tmp_path: Path) -> None:
    """Behind a proxy that mounts the app under a prefix, the docs load from under it."""
    runtime = AgentRuntime(demo_agents(), settings(tmp_path))
    app = create_app(runtime, allow_unauthenticated=True)
    async with client_of(app, root_path="/helix") as client:
        html = (await client.get("/docs")).text
    assert "url: '/helix/openapi.json'" in html
    assert "/helix/docs/assets/swagger-ui-bundle.js" in html
