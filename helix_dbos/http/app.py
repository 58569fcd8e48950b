"""The standalone agent server, and the lifespan helper for embedding the router.

``lifespan_for(runtime)`` launches the runtime when the app starts and shuts it down when the
app stops (DBOS is launched once per process). ``create_app`` builds the standalone server:
the given agents (or the demo agents, on the model ``HELIX_LLM`` names, else the scripted
one), session tokens when ``HELIX_AUTH_SECRET`` is set, and a refusal to build without
authentication unless ``allow_unauthenticated=True``. It serves the API documentation from local
files (``/docs``, ``/redoc``) and, when the runtime serves the demo agent, the demo page at ``/``.
Credentials in query strings (``?token=``) are masked in uvicorn's access log.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypedDict

from fastapi import APIRouter, FastAPI

from .._version import __version__
from ..config import HelixSettings, redact_url
from ..core.agents import Agent, AgentRegistry
from ..core.owner import OWNER_MAX_LENGTH
from ..demo import SERVED_STREAM_PAUSE_SECONDS, demo_agents
from ..errors import ConfigError, HelixError
from ..llm.factory import infer_llm
from ..observability.log import log_event, logging_configured
from ..observability.logging_config import LOG_LEVEL_ENV, EventFormatter, parse_level
from ..runtime import AgentRuntime
from .api_docs import install_api_docs
from .auth import AuthHook, TokenIssuer, session_token_auth
from .chat import create_chat_router
from .demo_page import install_demo_page, serves_demo_agent
from .errors import install_error_handlers
from .limits import DEFAULT_SUBMIT_RATE_LIMIT, SlidingWindowLimiter, limiter_for
from .metrics import METRICS_TOKEN_ENV, create_metrics_router, metrics_token_auth
from .openapi import document_session_tokens
from .router import create_router

__all__ = ["AUTH_SECRET_ENV", "TENANT_ENV", "create_app", "lifespan_for"]

#: The environment variable holding the session-token secret of the standalone server.
AUTH_SECRET_ENV = "HELIX_AUTH_SECRET"
#: The tenant every session the standalone server starts records (with session tokens).
TENANT_ENV = "HELIX_TENANT"


def lifespan_for(runtime: AgentRuntime) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """A FastAPI ``lifespan`` that launches ``runtime`` on startup and shuts it down after.

    Use it as ``FastAPI(lifespan=lifespan_for(runtime))``, or enter it from your own
    lifespan: ``async with lifespan_for(runtime)(app): yield``. When the process has
    configured no logging that would receive helix-dbos's events (as under a bare
    ``uvicorn app:app``), they go to stderr, one line each, while the app runs.
    """

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        undo = _print_events_unless_configured()
        try:
            try:
                await runtime.launch()
            except Exception as exc:
                # A wrong URL, a missing database, tables behind the code: one line (and a
                # traceback of a few frames from the server), not the driver's forty.
                reason = startup_failure(exc, runtime.settings.database_url)
                if reason is None:
                    raise  # a bug: its whole traceback
                log_event("runtime.start_failed", error=reason)
                raise RuntimeStartError(reason) from None
            try:
                yield
            finally:
                await runtime.shutdown()
        finally:
            undo()

    return lifespan


class RuntimeStartError(RuntimeError):
    """The runtime of an app could not launch; the message says why in one line."""


def startup_failure(exc: BaseException, database_url: str) -> str | None:
    """One line for a launch failure the operator can act on (a configuration, migration or
    database problem), or ``None`` for anything else (a bug keeps its traceback)."""
    from ..store.connection import DBAPIError
    from ..store.migrate import MigrationCommandError

    shown = redact_url(database_url)
    if isinstance(exc, HelixError):
        return exc.message
    if isinstance(exc, MigrationCommandError):
        return f"cannot migrate {shown}: {_first_line(exc)}"
    if isinstance(exc, DBAPIError):
        detail = _first_line(exc.orig if exc.orig is not None else exc)
        return f"cannot use the database {shown}: {detail}"
    return None


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).strip().splitlines()[:1]).strip() or type(exc).__name__


def _print_events_unless_configured() -> Callable[[], None]:
    """Print helix-dbos's events on stderr if nothing else would; returns what undoes it.

    Without a handler on the ``helix_dbos`` logger or above it, Python prints only warnings
    and errors, and an embedding app would show no event of its turns. An app that configured
    logging (``logging.basicConfig``, ``dictConfig``, ``configure_logging``) keeps its own:
    the events go to its handlers, at its levels.
    """
    log = logging.getLogger("helix_dbos")
    if logging_configured():
        return lambda: None
    handler = logging.StreamHandler()  # stderr
    handler.setFormatter(EventFormatter())
    level = log.level
    log.addHandler(handler)
    if level == logging.NOTSET:
        log.setLevel(parse_level(os.environ.get(LOG_LEVEL_ENV, "").strip() or "info"))

    def undo() -> None:
        log.removeHandler(handler)
        log.setLevel(level)

    return undo


def _metrics_router(runtime: AgentRuntime, token: str | None, *, authenticated: bool) -> APIRouter:
    """``GET /metrics``: behind its own token when one is set (``HELIX_METRICS_TOKEN``), open
    when the whole server is, else refused (a session token says nothing about operators)."""
    from_env = token is None
    token = token if token is not None else os.environ.get(METRICS_TOKEN_ENV) or None
    if token is not None:
        try:
            hook = metrics_token_auth(token)
        except ConfigError as exc:
            message = f"{METRICS_TOKEN_ENV}: {exc.message}" if from_env else exc.message
            raise ConfigError(message) from None
        return create_metrics_router(runtime, authenticate=hook)
    if not authenticated:
        return create_metrics_router(runtime, allow_unauthenticated=True)

    def refuse(_request: Any, _operation: str) -> dict[str, Any]:
        return {"error": f"Set {METRICS_TOKEN_ENV} on the server to scrape /metrics", "status": 401}

    return create_metrics_router(runtime, authenticate=refuse)


def _demo() -> list[Agent]:
    """The demo agents, on the model ``HELIX_LLM`` names (else the scripted one, whose replies
    stream word by word so a browser sees them arrive)."""
    spec = os.environ.get("HELIX_LLM", "").strip()
    return demo_agents(
        llm=infer_llm(spec) if spec else None, stream_pause_seconds=SERVED_STREAM_PAUSE_SECONDS
    )


class _RouterOptions(TypedDict):
    """The options the agent routes and the chat routes share (one hook, one rate limit)."""

    authenticate: AuthHook | None
    allow_unauthenticated: bool
    service_name: str | None
    verbose_validation_errors: bool
    rate_limit_per_minute: SlidingWindowLimiter | None
    token_issuer: TokenIssuer | None


def create_app(
    runtime: AgentRuntime | None = None,
    *,
    agents: Agent | Iterable[Agent] | AgentRegistry | None = None,
    settings: HelixSettings | None = None,
    allow_unauthenticated: bool = False,
    auth_secret: str | None = None,
    token_ttl_seconds: float = 3600,
    service_name: str | None = None,
    rate_limit_per_minute: int | None = DEFAULT_SUBMIT_RATE_LIMIT,
    verbose_validation_errors: bool = False,
    chat_agent_type: str | None = None,
    chat: bool = True,
    demo_page: bool | None = None,
    metrics_token: str | None = None,
    tenant: str | None = None,
) -> FastAPI:
    """The standalone agent server.

    Args:
        runtime: the runtime to serve; default: ``agents`` on ``settings``.
        agents: the agents to serve when no runtime is given (an ``Agent``, several, or an
            ``AgentRegistry``); default: the demo agents, on the model ``HELIX_LLM`` names
            (else the scripted model: no network, no key).
        settings: the runtime's settings when no runtime is given (default: from the
            ``HELIX_*`` environment; the database is ``HELIX_DATABASE_URL``, else the embedded
            SQLite file).
        allow_unauthenticated: serve without authentication when no secret is configured.
        auth_secret: the session-token secret; default ``HELIX_AUTH_SECRET``. With it,
            ``/start`` answers a token and every other call must carry it.
        token_ttl_seconds: how long a session token is valid.
        service_name: tags the log events and the unauthenticated warning.
        rate_limit_per_minute: submits per minute per session (``None``: no limit).
        verbose_validation_errors: validation details in the 400 answers (development only).
        chat_agent_type: the agent ``POST /chat`` (the AI SDK endpoint) starts; default: the
            first agent served.
        chat: serve the AI SDK chat routes (``/chat/sessions``, ``/chat``,
            ``/chat/{id}/stream``) next to the agent routes.
        demo_page: serve the demo page at ``/``; default: when the runtime serves the demo
            agent (an ``editor`` agent with the client tool ``editContent``).
        metrics_token: the bearer token a scrape of ``GET /metrics`` sends; default
            ``HELIX_METRICS_TOKEN``. Without one, ``/metrics`` is open on a server without
            authentication and refuses every scrape (401) on a server with it.
        tenant: with session tokens, the tenant every session this server starts records
            (a single-tenant server), so that approver tokens issued for it
            (``SessionTokens.issue_approver``, ``helix-dbos approver-token``) reach them;
            default ``HELIX_TENANT``; none: the sessions record no tenant.

    Raises:
        ConfigError: no secret and not ``allow_unauthenticated`` (or a secret under 32 bytes),
            an unknown ``chat_agent_type``, a ``HELIX_LLM`` that names no usable model,
            ``demo_page=True`` without the demo agent, or a metrics token under 16 characters.
    """
    secret = auth_secret if auth_secret is not None else os.environ.get(AUTH_SECRET_ENV) or None
    runtime = _runtime_for(runtime, agents, settings, service_name)
    chat_agent_type = _chat_agent(runtime, chat_agent_type, chat=chat)
    # One window per session for the agent routes and the chat: one documented limit.
    limiter = limiter_for(rate_limit_per_minute)
    authenticate, issuer = _session_tokens(secret, token_ttl_seconds, tenant)
    shared = _RouterOptions(
        authenticate=authenticate,
        allow_unauthenticated=allow_unauthenticated and authenticate is None,
        service_name=service_name,
        verbose_validation_errors=verbose_validation_errors,
        rate_limit_per_minute=limiter,
        token_issuer=issuer,
    )
    router = create_router(runtime, **shared)
    app = _bare_app(runtime, _wants_demo_page(runtime, demo_page), tokens=issuer is not None)
    app.include_router(router)
    app.include_router(_metrics_router(runtime, metrics_token, authenticated=secret is not None))
    if chat and chat_agent_type is not None:
        # The Vercel AI SDK chat endpoint (POST /chat), behind the same authentication.
        app.include_router(create_chat_router(runtime, agent_type=chat_agent_type, **shared))
    app.state.runtime = runtime
    return app


def _session_tokens(
    secret: str | None, ttl_seconds: float, tenant: str | None
) -> tuple[AuthHook | None, TokenIssuer | None]:
    """The session-token hook and issuer of a server with ``secret`` (none without one); its
    new sessions record ``tenant`` (default ``HELIX_TENANT``)."""
    if not secret:
        return None, None
    tenant = tenant if tenant is not None else os.environ.get(TENANT_ENV) or None
    return session_token_auth(secret, ttl_seconds, authorize_start=_records_tenant(tenant))


def _records_tenant(tenant: str | None) -> AuthHook | None:
    """The ``authorize_start`` hook of a single-tenant server: every new session records
    ``tenant`` (``None``: no hook, the sessions record none).

    Raises:
        ConfigError: a tenant that is not a short identifier.
    """
    if tenant is None:
        return None
    if not (0 < len(tenant) <= OWNER_MAX_LENGTH) or not tenant.isprintable():
        raise ConfigError(f"{TENANT_ENV}: a tenant is 1 to {OWNER_MAX_LENGTH} printable characters")

    def start_in_tenant(_request: Any, _operation: str) -> dict[str, Any]:
        return {"ok": True, "tenant": tenant}

    return start_in_tenant


def _runtime_for(
    runtime: AgentRuntime | None,
    agents: Agent | Iterable[Agent] | AgentRegistry | None,
    settings: HelixSettings | None,
    service_name: str | None,
) -> AgentRuntime:
    """The runtime to serve: ``runtime`` when given, else one over ``agents`` (default: the
    demo agents) on ``settings`` (default: from the environment)."""
    if runtime is not None:
        return runtime
    if agents is None:
        agents = _demo()
    elif isinstance(agents, Agent):
        agents = [agents]
    return AgentRuntime(agents, settings or HelixSettings.from_env(), service_name=service_name)


def _chat_agent(runtime: AgentRuntime, chat_agent_type: str | None, *, chat: bool) -> str | None:
    """The agent ``POST /chat`` starts: ``chat_agent_type``, else the first agent served.

    Raises:
        ConfigError: the chat routes are on and that agent is not served.
    """
    served = [agent.name for agent in runtime.registry]
    if chat_agent_type is None and served:
        chat_agent_type = served[0]
    if chat and chat_agent_type not in runtime.registry:
        raise ConfigError(
            f"The chat agent {chat_agent_type!r} is not served (agents: {', '.join(served)})"
        )
    return chat_agent_type


def _wants_demo_page(runtime: AgentRuntime, demo_page: bool | None) -> bool:
    """Whether to serve the demo page: as asked, else when the runtime serves the demo agent.

    Raises:
        ConfigError: the page is asked for and the runtime does not serve the demo agent.
    """
    if demo_page is None:
        return serves_demo_agent(runtime.registry)
    if demo_page and not serves_demo_agent(runtime.registry):
        raise ConfigError("The demo page needs the demo agent 'editor' with 'editContent'")
    return demo_page


def _bare_app(runtime: AgentRuntime, demo_page: bool, *, tokens: bool) -> FastAPI:
    """The FastAPI app before its routers: the runtime's lifespan, the typed error answers,
    the local API documentation (with session ``tokens``, its Authorize button) and, with
    ``demo_page``, the demo page."""
    app = FastAPI(
        title="helix-dbos agent server",
        version=__version__,
        lifespan=lifespan_for(runtime),
        docs_url=None,  # served from local files below: FastAPI's pages load from a CDN
        redoc_url=None,
    )
    install_error_handlers(app)
    install_api_docs(app)
    if tokens:
        # /docs gets an Authorize button; without authentication no scheme is declared.
        document_session_tokens(app)
    if demo_page:
        install_demo_page(app)
    return app
