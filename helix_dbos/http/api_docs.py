"""The interactive API documentation, served without a CDN.

FastAPI's own ``/docs`` and ``/redoc`` pages load Swagger UI and ReDoc from a CDN (and a
favicon and fonts from other hosts), so offline, or behind a strict proxy, they are blank. This
module serves both from the files the ``fastapi-offline`` package ships (Swagger UI 5, which
renders OpenAPI 3.1, and ReDoc's standalone bundle):

* ``GET /docs``: Swagger UI (its online validator is switched off: it would call out);
* ``GET /docs/oauth2-redirect``: Swagger UI's OAuth2 redirect helper;
* ``GET /redoc``: ReDoc, without web fonts;
* ``/docs/assets/...``: the scripts, the stylesheet and the favicon.

Build the app with ``docs_url=None, redoc_url=None`` and call :func:`install_api_docs`.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS_PATH", "install_api_docs"]

#: Where the documentation's scripts and styles are served.
ASSETS_PATH = "/docs/assets"

#: The files of Swagger UI and ReDoc, as the fastapi-offline package ships them.
_ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"


#: The one remote file ReDoc's bundle loads by itself: the logo of its "API docs by Redocly"
#: footer. The served copy shows the page's own favicon instead.
_REDOC_REMOTE_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


def _redoc_without_remote_logo() -> bytes:
    """ReDoc's bundle with its remote footer logo pointing at a local file (no request leaves
    the server, and nothing waits on a CDN offline)."""
    text = (_ASSETS_DIR / "redoc.standalone.js").read_text(encoding="utf-8")
    return text.replace(_REDOC_REMOTE_LOGO, f"{ASSETS_PATH}/favicon.png").encode("utf-8")


def install_api_docs(
    app: FastAPI, *, docs_url: str = "/docs", redoc_url: str = "/redoc"
) -> FastAPI:
    """Serve Swagger UI at ``docs_url`` and ReDoc at ``redoc_url`` from local files.

    The pages load ``app.openapi_url`` under the request's ``root_path``, so they keep working
    behind a proxy that mounts the app under a prefix.
    """
    if app.openapi_url is None:
        return app
    openapi_url = app.openapi_url
    oauth2_redirect = f"{docs_url}/oauth2-redirect"
    redoc_js = _redoc_without_remote_logo()

    # Registered before the mount, so it wins over the packaged file of the same name.
    @app.get(f"{ASSETS_PATH}/redoc.standalone.js", include_in_schema=False)
    async def redoc_script() -> Response:
        return Response(
            redoc_js,
            media_type="text/javascript",
            headers={"Cache-Control": "public, max-age=3600"},
        )

    app.mount(ASSETS_PATH, StaticFiles(directory=_ASSETS_DIR), name="api-docs-assets")

    def prefix(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    @app.get(docs_url, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = prefix(request)
        return get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
            oauth2_redirect_url=root + oauth2_redirect,
            # validatorUrl: None keeps Swagger UI from sending the document to its online
            # validator.
            swagger_ui_parameters={**(app.swagger_ui_parameters or {}), "validatorUrl": None},
        )

    @app.get(oauth2_redirect, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(redoc_url, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = prefix(request)
        return get_redoc_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
            with_google_fonts=False,
        )

    return app
