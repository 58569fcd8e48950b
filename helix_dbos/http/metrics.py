"""``GET /metrics``: a runtime's live metrics in Prometheus's text format.

``create_metrics_router(runtime, ...)`` is the route, for any FastAPI app (the standalone
server includes it); ``metrics_app(runtime, ...)`` is the same route as an ASGI app of its own,
to mount in an app of any framework or serve on a port of its own. The route runs the
authenticate hook with the operation ``metrics`` (the request names no session), and fails
closed like the agent routes: without a hook it must be opted out of explicitly.
``metrics_token_auth(token)`` builds a hook for a scraper's static bearer token
(``authorization.credentials`` in Prometheus's ``scrape_config``).

The route is left out of the OpenAPI document: it is for the monitoring system, not for API
clients, and answers text, not JSON.
"""

from __future__ import annotations

import hmac

from fastapi import APIRouter, FastAPI
from starlette.requests import Request
from starlette.responses import Response

from ..errors import ConfigError
from ..observability.approval_metrics import CONTENT_TYPE
from ..runtime import AgentRuntime
from ..runtime.live_metrics import scrape
from .auth import AuthHook, AuthResult, SessionTokens, run_authenticate
from .errors import HelixRoute, install_error_handlers

__all__ = [
    "METRICS_OPERATION",
    "METRICS_TOKEN_ENV",
    "create_metrics_router",
    "metrics_app",
    "metrics_token_auth",
]

#: The operation name the authenticate hook receives for a scrape.
METRICS_OPERATION = "metrics"
#: The environment variable holding the standalone server's scrape token.
METRICS_TOKEN_ENV = "HELIX_METRICS_TOKEN"
#: A scrape token shorter than this is refused (it would be guessable).
MIN_TOKEN_LENGTH = 16


def metrics_token_auth(token: str) -> AuthHook:
    """A hook that lets a scrape in with ``Authorization: Bearer <token>``, and nothing else.

    Raises:
        ConfigError: the token is shorter than 16 characters or not ASCII.
    """
    if len(token) < MIN_TOKEN_LENGTH or not token.isascii():
        raise ConfigError(f"The metrics token must be at least {MIN_TOKEN_LENGTH} ASCII characters")
    expected = token.encode("ascii")

    def authenticate(request: Request, operation: str) -> AuthResult:
        if operation != METRICS_OPERATION:
            return False
        given = SessionTokens.token_of(request)
        if given is None or not given.isascii():
            return {
                "error": "A metrics token is required: send Authorization: Bearer "
                "<the server's HELIX_METRICS_TOKEN> (scripts/demo keeps it in demo.env)",
                "status": 401,
            }
        # Constant-time comparison: the check leaks nothing about the token.
        if not hmac.compare_digest(given.encode("ascii"), expected):
            return {"error": "The metrics token is invalid", "status": 401}
        return True

    return authenticate


def create_metrics_router(
    runtime: AgentRuntime,
    *,
    authenticate: AuthHook | None = None,
    allow_unauthenticated: bool = False,
    path: str = "/metrics",
) -> APIRouter:
    """The ``GET /metrics`` route over ``runtime``; include it in any FastAPI app.

    Args:
        runtime: the runtime whose metrics it serves (launched by the app's lifespan).
        authenticate: run with the operation ``metrics`` before each scrape (for example
            ``metrics_token_auth(token)``).
        allow_unauthenticated: serve without a hook (behind a network boundary that only the
            monitoring system crosses).
        path: where the route answers.

    Raises:
        ConfigError: neither ``authenticate`` nor ``allow_unauthenticated=True``.
    """
    if authenticate is None and not allow_unauthenticated:
        raise ConfigError(
            "The metrics endpoint needs authentication: pass authenticate= (for example "
            "metrics_token_auth(token)) or allow_unauthenticated=True"
        )
    router = APIRouter(route_class=HelixRoute)

    @router.get(path, include_in_schema=False)
    async def metrics(request: Request) -> Response:
        await run_authenticate(authenticate, request, METRICS_OPERATION)
        return Response(await scrape(runtime), media_type=CONTENT_TYPE)

    return router


def metrics_app(
    runtime: AgentRuntime,
    *,
    authenticate: AuthHook | None = None,
    allow_unauthenticated: bool = False,
) -> FastAPI:
    """The route as an ASGI app of its own, answering at its root.

    Mount it (``app.mount("/metrics", metrics_app(runtime, ...))``: the scrape URL is then
    ``/metrics/``) or serve it on a port of its own. The runtime is launched by whoever owns it
    (the main app's lifespan); this app has none.

    Raises:
        ConfigError: neither ``authenticate`` nor ``allow_unauthenticated=True``.
    """
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    install_error_handlers(app)
    app.include_router(
        create_metrics_router(
            runtime,
            authenticate=authenticate,
            allow_unauthenticated=allow_unauthenticated,
            path="/",
        )
    )
    return app
