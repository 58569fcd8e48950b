"""The demo page: a browser client of the demo ``editor`` agent, served at ``/``.

Plain HTML, CSS and JavaScript shipped in the package (``static/``): no CDN, no build step.
The page holds a document and a chat. It talks to the agent server over the documented HTTP
API only (``POST /start``, ``GET /sse``, ``POST /submit-tool-result``, ``POST /resume``,
``POST /interrupt``), so it is also a worked example of a client:

* the model's text streams into the chat from ``text_delta`` events;
* the client tool ``editContent`` runs in the page: it applies the edits to the document and
  submits ``{applied, failed, newVersionId}``;
* an approval-gated call (``publishDocument``) shows Approve and Deny buttons, which submit
  the human's decision.

With session tokens on, the page keeps the token that ``/start`` answers and sends it as
``Authorization: Bearer``; a page opened as ``/#session=<id>&token=<token>`` joins that
session with that token.

A second page, ``inbox`` next to it (``approvals.html``), lists the approvals waiting across
sessions (``GET /approvals``) with Approve and Deny buttons: every session's on a server
without authentication; with session tokens, those of the sessions this browser started (the
chat page records each session's token in ``localStorage`` for it).

``create_app`` serves the page when the runtime serves the demo agent (see
:func:`serves_demo_agent`); :func:`install_demo_page` mounts it on any app.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from ...core.agents import AgentRegistry
from ...demo import EDITOR_AGENT

__all__ = ["PAGE_ASSETS_PATH", "install_demo_page", "serves_demo_agent"]

#: Where the page's script and stylesheet are served.
PAGE_ASSETS_PATH = "/demo-page"

_STATIC = Path(__file__).resolve().parent / "static"

#: The page loads nothing from elsewhere, runs no inline script and cannot be framed.
_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": _CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def serves_demo_agent(registry: AgentRegistry) -> bool:
    """Whether the registry has the agent the page talks to.

    That is an agent named ``editor`` with a client tool ``editContent``: the demo agents
    (on the scripted model or on ``HELIX_LLM``'s), or an app's own agent of that shape.
    """
    if EDITOR_AGENT not in registry:
        return False
    agent = registry.get(EDITOR_AGENT)
    return any(t.name == "editContent" and t.execution == "client" for t in agent.tools)


def install_demo_page(app: FastAPI, *, path: str = "/") -> FastAPI:
    """Serve the demo page at ``path``, its approvals page at ``<path>inbox``, and their
    assets under ``/demo-page``.

    The pages call the API with URLs relative to themselves, so serve them next to the routes
    of ``create_router`` (and ``create_chat_router``), under the same prefix.
    """
    app.mount(PAGE_ASSETS_PATH, StaticFiles(directory=_STATIC), name="demo-page-assets")

    @app.get(path, include_in_schema=False)
    async def demo_page() -> FileResponse:
        return FileResponse(_STATIC / "index.html", media_type="text/html", headers=_HEADERS)

    @app.get(path.rstrip("/") + "/inbox", include_in_schema=False)
    async def approvals_page() -> FileResponse:
        return FileResponse(_STATIC / "approvals.html", media_type="text/html", headers=_HEADERS)

    return app
